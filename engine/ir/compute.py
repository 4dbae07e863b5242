"""Hardware IR: what a device computes with — its matrix and vector peaks, the efficiency curve of its matrix
unit, the per-kernel and host costs a framework pays to use it (``Compute``). Split from ``ir.hardware``,
which re-exports these names; a component carries one as its ``compute``."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

import numpy as np
from pydantic import Field, field_validator, model_validator
from tilewright.engine.ir.common import (
    DEFAULT_FIDELITY,
    BytesPerSecond,
    DType,
    Fraction,
    MathFidelity,
    PrefillOrder,
    QuietDefaultsModel,
    Seconds,
    StrictModel,
    Watts,
)
from tilewright.engine.ir.tile_grid import TileGrid

PositiveInt = Annotated[int, Field(ge=1)]

class EfficiencyCurve(StrictModel):
    """Achieved fraction of peak versus operation size, interpolated linearly in log10(size).

    ``size`` is FLOPs for compute curves and bytes for bandwidth curves. Outside the given points the
    nearest end value holds (no extrapolation), so a curve never promises more than was measured.
    """

    points: list[tuple[Annotated[float, Field(gt=0)], Fraction]] = Field(min_length=1)
    comment: str = ""

    @field_validator("points")
    @classmethod
    def _ascending(cls, pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
        sizes = [p[0] for p in pts]
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ValueError("sizes must be strictly ascending")
        return pts

    def at(self, size: float | np.ndarray) -> float | np.ndarray:
        cached = self.__dict__.get("_xy")
        if cached is None or cached[2] is not self.points:
            xs = np.log10([p[0] for p in self.points])
            ys = np.array([p[1] for p in self.points])
            cached = (xs, ys, self.points)
            object.__setattr__(self, "_xy", cached)  # a cache, not a field: not validated or saved
        xs, ys, _ = cached
        if np.isscalar(size):
            return float(np.interp(np.log10(max(float(size), 1e-30)), xs, ys))
        return np.interp(np.log10(np.maximum(size, 1e-30)), xs, ys)


class FlashRates(StrictModel):
    """The measured rates of one more fused (flash) attention kernel on a device, as fractions of its matrix peak
    over the tiles the kernel computes (``Compute.sdpa_flash``). A device states each kernel a framework may run
    beside the one its ``flash_*`` fields measure, since kernels differ by up to 1.8x on the same chip (H100:
    cuDNN's 600 against FlashAttention-2's 370 TFLOP/s forward); which framework runs which kernel is
    ``plan.framework_host``'s to say."""

    forward: Fraction = Field(description="the forward's rate at large sizes, no mask")
    backward: Fraction = Field(description="the backward's (recompute and four gradient GEMMs), no mask")
    causal_forward: Fraction | None = Field(
        None, description="the forward under a causal (or sliding-window) mask, over the tiles it computes; "
        "None: forward")
    causal_backward: Fraction | None = Field(None, description="the same for the backward; None: backward")


class RuntimeGraphs(StrEnum):
    """Which inference passes the device's runtime replays as captured graphs (CUDA graphs): a replay issues
    every kernel of the pass from the device, so the host's per-kernel dispatch (``host_dispatch_s``) is not
    paid. ``none``: every kernel dispatched by the host (PyTorch eager, and training always); ``decode``:
    pure decode steps only (vLLM, SGLang: prefill and mixed batches run eager); ``all``: every inference pass."""

    none = "none"
    decode = "decode"
    all = "all"


class RuntimeCcl(StrEnum):
    """How the device's runtime runs its collectives between chips of a grid fabric (Ethernet meshes).
    ``generic``: every call of a ttnn CCL pays what the fabric's ``collective`` costs say (program launch,
    connection set-up, an entry barrier over the diameter, the data pipeline). ``persistent``: the runtime
    pre-creates its global semaphores and double-buffers persistent intermediate buffers on every axis (tt-metal
    models/demos/llama3_70b_galaxy/tt/llama_ccl.py, TT_CCL), so no entry barrier is needed (the data crosses the
    diameter once) and it runs the one-shot decode collectives: an all-reduce as a direct all-gather of each
    member's whole tensor into the persistent buffer and a local sum (all_reduce_async), a reduce-scatter as direct
    writes of each shard to its owner (llama_reduce_scatter); ``perf.collective_grid`` offers them beside the
    generic algorithms and the cheaper wins (prefill's larger tensors keep reduce-scatter + all-gather)."""

    generic = "generic"
    persistent = "persistent"


def _tile_side(largest: int, extent: float) -> int:
    """A GEMM tile's side along an extent: libraries pick narrower tiles for skinny products (decode, small
    batches), never taller or wider than the problem rounded up to a power of two (at least 16, the MMA
    granule)."""
    return min(largest, max(16, 1 << max(0, math.ceil(math.log2(extent)))))


class Compute(QuietDefaultsModel):
    """Arithmetic of one device instance.

    A device that is a grid of cores (a Tenstorrent chip) carries the grid in ``grid``; its peak FLOP/s per
    format are then derived from the grid (cores × FLOP/cycle at the format's default fidelity × clock) and
    the cost model spreads every op over the cores itself (``perf.spatial``)."""

    _quiet = ("grid", "fixed_op_s", "host_dispatch_s", "host_call_s", "runtime_prefill", "runtime_graphs",
              "programs_by_op", "program_s_by_op", "gemm_granule", "runtime_step_s", "runtime_sampling", "host_sync_s",
              "host_collective_s", "host_backward_s", "runtime_ccl", "runtime_host_read_bytes_per_s",
              "flash_forward_efficiency",
              "flash_backward_efficiency", "flash_causal_forward_efficiency", "flash_causal_backward_efficiency",
              "sdpa_flash", "format_efficiency", "microscaling", "energy_pj_per_flop", "idle_power_w", "collective_sms",
              "dropout_forward_efficiency", "attention_bmm_efficiency")

    peak_flops: dict[DType, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="peak matrix FLOP/s per data type (derived when a grid is given)"
    )
    vector_flops: Annotated[float, Field(gt=0)] | None = Field(
        None, description="FLOP/s of the vector/elementwise units; default peak/16 of the widest type"
    )
    pe_array: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = Field(
        None, description="systolic / PE array rows × cols of one tensor core"
    )
    tensor_cores: Annotated[int, Field(ge=1)] = 1
    gemm_tile: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = Field(
        None, description="output tile (rows × cols) one unit computes at a time; default pe_array"
    )
    gemm_units: Annotated[int, Field(ge=1)] | None = Field(
        None, description="units that each take one output tile at a time (GPU SMs); default tensor_cores"
    )
    gemm_granule: tuple[PositiveInt, PositiveInt, PositiveInt] | None = Field(
        None,
        description="systolic matrix units: the M × N × K block one unit (gemm_units, default tensor_cores) "
        "takes at a time, every block in the same time; M, N and K are padded to whole blocks (TPU MXU: "
        "8 streamed rows × 128 × 128). Replaces gemm_tile's output tiling when set",
    )
    vector_cores: Annotated[int, Field(ge=0)] = 1
    efficiency: EfficiencyCurve | None = Field(
        None, description="matrix-op efficiency versus FLOPs per op; None means always peak"
    )
    flash_forward_efficiency: Fraction | None = Field(
        None,
        description="fraction of the matrix peak a fused (flash) attention kernel's forward reaches at large "
        "sizes, over the tiles it computes; None: the GEMM efficiency curve's best (the curve's fixed part, "
        "launch and fill, is paid either way)",
    )
    flash_backward_efficiency: Fraction | None = Field(
        None, description="the same for the fused attention kernel's backward (recompute and four gradient GEMMs)"
    )
    flash_causal_forward_efficiency: Fraction | None = Field(
        None,
        description="flash_forward_efficiency for a causal (or sliding-window) kernel, over the tiles it computes: "
        "its diagonal tiles are masked element by element and its query tiles carry unequal work, so it reaches "
        "less than the unmasked kernel; None: flash_forward_efficiency",
    )
    flash_causal_backward_efficiency: Fraction | None = Field(
        None, description="the same for the causal kernel's backward; None: flash_backward_efficiency"
    )
    dropout_forward_efficiency: Fraction | None = Field(
        None,
        description="fraction of the local memory's achievable bandwidth a dropout forward kernel reaches while it "
        "draws its random numbers (PyTorch's Philox dropout: its input, output and 1-byte mask streamed at this "
        "share of the rate other memory-bound kernels reach); None: the same rate",
    )
    attention_bmm_efficiency: Fraction | None = Field(
        None,
        description="fraction of the local memory's achievable bandwidth an unfused attention's batched GEMMs (QKᵀ, "
        "PV and their gradients: memory-bound, reducing over a head's width) move their bytes at, the s × s scores "
        "written or read once per kernel (``perf.score_kernels``); None: the rate other memory-bound kernels reach",
    )
    sdpa_flash: FlashRates | None = Field(
        None,
        description="the rates of the fused attention kernel PyTorch's scaled_dot_product_attention runs by default "
        "(its backend priority puts FlashAttention-2 first), which host_framework 'pytorch' and 'pytorch-compile' "
        "run (plan.framework_host), when it is not the kernel the flash_* fields measure (Transformer Engine's "
        "choice for Megatron frameworks: cuDNN's on Hopper); None: the same kernel (A100: FlashAttention-2 "
        "either way)",
    )
    format_efficiency: dict[DType, Fraction] = Field(
        default_factory=dict,
        description="per data type, the share of the efficiency curve a GEMM in that format reaches (its peak is "
        "scaled by it): a format whose datasheet peak the same SMs cannot feed as well (fp8 on Hopper); 1 if absent",
    )
    microscaling: bool = Field(
        False,
        description="the matrix units apply block scales themselves (OCP microscaling, MXFP8: one E8M0 scale per "
        "32 elements, Blackwell's tensor cores); without it an fp8 run cannot use mapping.formats.fp8_scaling "
        "'mxfp8'",
    )
    overlap_compute_memory: bool = Field(
        True, description="roofline overlap of compute and memory time (max) instead of their sum"
    )
    grid: TileGrid | None = Field(None, description="the device's grid of cores; None: one opaque unit")
    fixed_op_s: Seconds = Field(0.0, description="fixed cost of every op (dispatch, launch, synchronisation)")
    programs_by_op: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="grid devices: device programs the runtime runs for an op, by glob on the op's name within "
        "its layer (first match wins; default 1), the first paying fixed_op_s, each further one program_s_by_op — "
        "the data-movement and head-reshaping programs a runtime adds around a model op, or 0 for an op another "
        "program does (softmax inside SDPA)",
    )
    program_s_by_op: dict[str, Seconds] = Field(
        default_factory=dict,
        description="grid devices: device time of each program an op's runtime runs beyond its first "
        "(programs_by_op), by glob on the op's name within its layer (first match wins; default fixed_op_s): "
        "the measured kernel duration plus op-to-op gap of those small data-movement programs (head reshapes, "
        "rotary, cache updates, reshards), which the op model has no kernel for",
    )
    host_dispatch_s: Seconds = Field(
        0.0, description="host (CPU) time to issue one kernel; overlaps device work, binds when kernels are short"
    )
    host_call_s: Seconds = Field(
        0.0,
        description="host time of a framework call that issues no kernel (a view, a module call, a Python "
        "autograd Function's apply counts three), which an eager framework makes between its kernels",
    )
    host_sync_s: Seconds = Field(
        0.0,
        description="device idle per host synchronisation of an eager training framework (the device drains, "
        "the host thread wakes and its next launch reaches the device), on top of that launch's host_dispatch_s",
    )
    host_collective_s: Seconds = Field(
        0.0,
        description="host time of one collective call an eager training framework makes (torch.distributed over "
        "NCCL: Python, the process group's bookkeeping, stream joins, the NCCL enqueue) up to its kernel's launch; "
        "the device waits for it when the host binds (the rest of the call overlaps the collective)",
    )
    host_backward_s: Seconds = Field(
        0.0,
        description="host start-up of one top-level autograd backward() call of an eager training framework "
        "(graph task, hand-off to the device's engine thread and back), paid once per backward pass on a "
        "drained device, and again by each fully recomputed layer's re-entrant backward() (plan.launch)",
    )
    runtime_prefill: PrefillOrder = Field(
        PrefillOrder.batched, description="how the device's serving runtime prefills a batch (run.inference.prefill)"
    )
    runtime_graphs: RuntimeGraphs = Field(
        RuntimeGraphs.none, description="inference passes replayed as captured graphs, without host dispatch"
    )
    runtime_step_s: Seconds = Field(
        0.0,
        description="host work of the serving runtime in each inference iteration that the device waits for "
        "(scheduling, input preparation, the sampled tokens' copy back and output processing), paid once per "
        "prefill or decode pass of the first pipeline stage",
    )
    runtime_sampling: bool = Field(
        False,
        description="the serving runtime ends each decode step on the device (tt-transformers' traced decode): "
        "the vocabulary-split logits all-gathered over the tensor group, untilized (whole tiles of rows) and, "
        "for a batch of one sequence, their argmax taken and the next step's position, rotary index and token "
        "updated in place (ops named sample_*, ``workloads.transformer_inference.sampling_ops``); off: the "
        "logits' sampling is not modelled (a host's, or a GPU runtime's)",
    )
    runtime_host_read_bytes_per_s: BytesPerSecond | None = Field(
        None,
        description="with runtime_sampling: the rate at which the serving runtime reads a device tensor back to "
        "the host (its blocking device-to-host copy over PCIe, host-side copies included). A decode step of more "
        "than one sequence is sampled on the host: the untilized logits of one device (the tile-padded rows x "
        "the vocabulary, bf16) are read at this rate while the device waits "
        "(``plan.inference_phases.host_sampling_s``); None: that read is not modelled",
    )
    runtime_ccl: RuntimeCcl = Field(
        RuntimeCcl.generic,
        description="grid fabrics (Ethernet meshes): how the runtime runs its collectives between chips: "
        "'generic' (every call sets up and synchronises, the fabric's collective costs) or 'persistent' (global "
        "semaphores and double-buffered persistent buffers made once: no entry barrier, and the one-shot "
        "direct all-gather-and-sum all-reduce and direct reduce-scatter of tt-metal's llama3_70b_galaxy decode)",
    )
    energy_pj_per_flop: dict[DType, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="per data type, the energy one matrix FLOP adds above the idle draw (its dynamic energy, "
        "with the register, shared-memory and cache traffic that feeds it): (power under a sustained GEMM - "
        "idle_power_w) / that GEMM's FLOP/s; a format without one takes the format its peak falls back to "
        "(``peak``); none at all: compute energy not known",
    )
    idle_power_w: Watts | None = Field(
        None,
        description="what the device draws powered on, clocks up and nothing running (leakage, clock tree, "
        "memory refresh and PHYs): drawn for the whole iteration or request, busy or not. Not ``power_w`` "
        "(the component's rated maximum, a budget); None: not known",
    )
    collective_sms: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="SMs (gemm_units) a collective library's kernel holds while it runs, one CTA per channel "
        "(NCCL's channels): compute overlapped with a collective runs on the rest (engine/perf/comm_sm.py); "
        "None: the collective takes none (copy engines, a dataflow device's own fabric)",
    )
    comment: str = ""

    @model_validator(mode="after")
    def _peaks(self) -> Compute:
        if self.grid is not None:
            derived = {
                fmt: self.grid.peak(fmt, DEFAULT_FIDELITY[fmt]) for fmt in self.grid.matrix_flops_per_cycle
            }
            object.__setattr__(self, "peak_flops", derived)
        elif not self.peak_flops:
            raise ValueError("peak_flops: give the peak FLOP/s of at least one data type (or a grid)")
        for name in ("programs_by_op", "program_s_by_op"):
            if self.grid is None and getattr(self, name):
                raise ValueError(f"{name}: device programs per op are a grid device's runtime (compute.grid); "
                                 "a device without a grid launches kernels (fixed_op_s, host_dispatch_s)")
        return self

    def flash_efficiency(self, backward: bool, causal: bool, sdpa: bool = False) -> float | None:
        """The fused attention kernel's rate for one pass (the ``flash_*_efficiency`` fields, or ``sdpa_flash``'s
        when ``sdpa``: the framework calls PyTorch's SDPA and the device gives that kernel's rates): a masked
        kernel's own measured rate when the device gives one, else the unmasked kernel's; None: no kernel rate
        (the GEMM curve's best). The one place the kernel choice and the causal fallback are read
        (``perf.device.DeviceModel.flash_parts``)."""
        if sdpa and self.sdpa_flash is not None:
            r = self.sdpa_flash
            plain, masked = (r.backward, r.causal_backward) if backward else (r.forward, r.causal_forward)
        else:
            plain = self.flash_backward_efficiency if backward else self.flash_forward_efficiency
            masked = self.flash_causal_backward_efficiency if backward else self.flash_causal_forward_efficiency
        if not causal:
            return plain
        return plain if masked is None else masked

    def peak(self, dtype: DType | str, fidelity: MathFidelity | str | None = None) -> float:
        """Peak FLOP/s for ``dtype``, falling back to the nearest wider floating-point type the device has
        (fp8 without fp8 units runs as fp16, not on integer units; block floats run as bf16). On a grid,
        ``fidelity`` (default: the format's, ``DEFAULT_FIDELITY``) picks the matrix engine's rate."""
        d = DType(dtype)
        if self.grid is not None:
            return self.grid.peak(d, fidelity or DEFAULT_FIDELITY[d])
        return self.peak_flops[self.runs_as(d)]

    def runs_as(self, dtype: DType | str) -> DType:
        """The format whose units a ``dtype`` op runs on (not on a grid): its own, else the nearest wider
        floating-point format the device has (``peak``), else the fastest."""
        d = DType(dtype)
        if d in self.peak_flops:
            return d
        order = [DType.fp8, DType.fp16, DType.bf16, DType.tf32, DType.fp32]
        if d is DType.int8:
            order = [DType.int8, *order[1:]]
        elif d in (DType.bfp8, DType.bfp4):
            order = order[2:]
        for cand in order[order.index(d) :] if d in order else order:
            if cand in self.peak_flops:
                return cand
        return max(self.peak_flops, key=self.peak_flops.__getitem__)

    def fallback_note(self, dtype: DType | str) -> str | None:
        """What a run should say when ``dtype`` has no units of its own here (``runs_as`` picks another
        format's), None when it has them or on a grid (whose formats have their own rates): fp16 training
        on an int8-only design priced at the int8 peak is an assumption the user must see, not a silent one."""
        d = DType(dtype)
        if self.grid is not None or d in self.peak_flops:
            return None
        used = self.runs_as(d)
        has = ", ".join(f.value for f in self.peak_flops)
        return (f"{d.value} has no peak of its own on this device (peak_flops lists {has}): its matrix ops run at "
                f"the {used.value} peak, {self.peak_flops[used] / 1e12:.4g} TFLOP/s")

    def flop_energy_pj(self, dtype: DType | str) -> float | None:
        """pJ per matrix FLOP in ``dtype`` (``energy_pj_per_flop``): the format's own figure, else the figure of
        the format ``peak`` falls back to (fp8 without fp8 units runs as fp16 and costs what fp16 costs), else
        None — never another format's figure for a format the device has units for."""
        d = DType(dtype)
        if d in self.energy_pj_per_flop or self.grid is not None:
            return self.energy_pj_per_flop.get(d)
        return self.energy_pj_per_flop.get(self.runs_as(d))

    def shape_efficiency(self, m: float, n: float, k: float = 0.0, batch: float = 1.0) -> float:
        """Tile and wave quantization of an M×N output (NVIDIA, "Matrix Multiplication Background",
        §3): partial edge tiles do wasted work, and the last wave of tiles leaves units idle. With fewer
        tiles than units, libraries split K across the idle units (split-K), in slices of at least 256.
        ``batch`` > 1: a batched GEMM of that many M×N×K products in one kernel (``torch.bmm``, a strided-batched
        cuBLAS call): each product is tiled on its own and all their tiles fill the units in shared waves, split
        along K like one GEMM's when batch × tiles leave units idle. cuBLAS's batched path has split-K kernels:
        ``torch.bmm`` of small-output, long-K shapes runs ``nvjet_…_splitK`` with ``cublasLt::splitKreduce_kernel``
        (profiled on B200 in Dao-AILab/quack PR #157; its batch counts are not stated), and XLA's H100 table
        times a 2 × 256×256×1024 kernel at 7.3 µs, less than the 9 µs one SM needs at peak for one of its four
        whole 256 × 128 × 1024 tiles (``benchmarks/calibrate_gemm_gpu.py``): the idle units take part of K.
        (CUTLASS's own universal GEMM has no such mode: its grid's z is either the batch or the K slices.)"""
        if self.gemm_granule is not None:
            return self._granule_efficiency(m, n, k, batch)
        tile = self.gemm_tile or self.pe_array
        if tile is None or m <= 0 or n <= 0:
            return 1.0
        units = self.gemm_units or self.tensor_cores
        tm, tn = _tile_side(tile[0], m), _tile_side(tile[1], n)
        rows, cols = math.ceil(m / tm), math.ceil(n / tn)
        tiles = rows * cols * math.ceil(batch)
        if tiles < units and k > 0:
            tiles *= max(1, min(units // tiles, math.ceil(k / 256)))
        waves = math.ceil(tiles / units)
        return (m * n) / (rows * tm * cols * tn) * tiles / (waves * units)

    def tile_rows(self, m: float) -> float | None:
        """The output-tile height a GEMM library picks for ``m`` rows (``shape_efficiency``); None without
        tiles or on a systolic array (``gemm_granule``)."""
        tile = self.gemm_tile or self.pe_array
        if tile is None or self.gemm_granule is not None or m <= 0:
            return None
        return _tile_side(tile[0], m)

    def _granule_efficiency(self, m: float, n: float, k: float, batch: float = 1.0) -> float:
        """A systolic array holds a K × N block of the weights and streams M rows past it, a few rows per
        pass: M, N and K are each padded to whole blocks (``gemm_granule``) and every block costs a unit the
        same time, so the useful fraction is M·N·K over the padded volume. Blocks (K blocks too: partial sums
        add up afterwards) are dealt to the units in waves, and a last partial wave leaves units idle; a
        ``batch`` of products deals all their blocks together."""
        assert self.gemm_granule is not None
        if m <= 0 or n <= 0:
            return 1.0
        gm, gn, gk = self.gemm_granule
        if k <= 0:  # depth not given: only the output is padded
            k, gk = 1.0, 1
        blocks = [math.ceil(x / g) for x, g in ((m, gm), (n, gn), (k, gk))]
        padded = blocks[0] * gm * blocks[1] * gn * blocks[2] * gk
        count = blocks[0] * blocks[1] * blocks[2] * math.ceil(batch)
        units = self.gemm_units or self.tensor_cores
        waves = math.ceil(count / units)
        return (m * n * k) / padded * count / (waves * units)

    def vector_peak(self) -> float:
        if self.vector_flops:
            return self.vector_flops
        if self.grid is not None:
            return self.grid.vector_peak()
        return max(self.peak_flops.values()) / 16.0

"""One-line descriptions of components with their key figures and units, shared by canvas labels,
the outline's tooltips and (later) reports: "gpu · chip · 312 TFLOP/s bf16 · 80 GB HBM".
"""

from __future__ import annotations

from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Component, Interconnect, Memory
from tilewright.studio.units import BYTES, BYTES_PER_S, FLOPS, SECONDS, format_value, plural

PREFERRED_DTYPES = (DType.bf16, DType.fp16, DType.fp8, DType.tf32, DType.fp32, DType.int8)


def headline_dtype(component: Component) -> DType | None:
    """The data type whose peak is quoted: bf16 when the device has it (what training uses)."""
    compute = component.compute
    if compute is None:
        return None
    for dt in PREFERRED_DTYPES:
        if dt in compute.peak_flops:
            return dt
    return next(iter(compute.peak_flops))


def _instance_peak(component: Component, dtype: DType) -> float:
    """FLOP/s of one instance of ``component``, summed over every device inside it."""
    own = component.compute.peak(dtype) if component.compute else 0.0
    return own + sum(c.count * _instance_peak(c, dtype) for c in component.children)


def _instance_memory(component: Component) -> dict[str, float]:
    """Bytes of memory per instance, by memory kind. An edge-attached memory counts its capacity once,
    however many ports reach it: claiming less than is there is the safer error on a label."""
    out: dict[str, float] = {}
    for m in component.memories:
        out[m.kind.value] = out.get(m.kind.value, 0.0) + m.capacity_bytes
    for child in component.children:
        for kind, size in _instance_memory(child).items():
            out[kind] = out.get(kind, 0.0) + child.count * size
    return out


def key_figures(component: Component) -> list[str]:
    """Peak compute and memory of ONE instance, each with its unit."""
    figures: list[str] = []
    dtype = headline_dtype(component) or _first_dtype(component)
    if dtype is not None:
        figures.append(f"{format_value(_instance_peak(component, dtype), FLOPS)} {dtype.value}")
    for kind, size in sorted(_instance_memory(component).items(), key=lambda kv: -kv[1]):
        figures.append(f"{format_value(size, BYTES)} {kind.upper()}")
    devices = component.devices_per_instance()
    if component.children and devices:
        figures.append(f"{devices} {plural('device', devices)}")
    return figures


def _first_dtype(component: Component) -> DType | None:
    for _, comp in component.walk():
        dt = headline_dtype(comp)
        if dt is not None:
            return dt
    return None


def title(component: Component) -> str:
    shape = f" · {component.rows} × {component.cols}" if component.count > 1 else ""
    grows = " · rows grow to fit the run" if component.growable else ""
    return f"{component.name} · {component.kind.value}{shape}{grows}"


def one_line(component: Component) -> str:
    return " · ".join([component.name, component.kind.value, *key_figures(component)])


def block_caption(component: Component) -> str:
    """Text inside a far-zoomed grid: "64 × 64 tiles"."""
    return f"{component.rows} × {component.cols} {plural(component.kind.value, component.count)}"


def interconnect_caption(ic: Interconnect) -> str:
    parts = [ic.topology.value, f"{format_value(ic.link_bandwidth_bytes_per_s, BYTES_PER_S)} per link"]
    if ic.links > 1:
        parts[-1] = f"{ic.links} × {parts[-1]}"
    if ic.link_latency_s:
        parts.append(format_value(ic.link_latency_s, SECONDS))
    return " · ".join(parts)


def memory_caption(m: Memory) -> str:
    ports = f" · {m.ports_per_edge} {plural('port', m.ports_per_edge)}/edge" if m.attach else ""
    return (
        f"{m.name} · {m.kind.value.upper()} · {format_value(m.capacity_bytes, BYTES)} · "
        f"{format_value(m.bandwidth_bytes_per_s, BYTES_PER_S)}{ports}"
    )

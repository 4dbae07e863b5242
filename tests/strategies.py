"""Hypothesis strategies for random, valid projects."""

from __future__ import annotations

from hypothesis import strategies as st
from tilewright.engine.ir import (
    CNNSpec,
    Component,
    Compute,
    EfficiencyCurve,
    GPTSpec,
    Interconnect,
    LlamaSpec,
    Mapping,
    Memory,
    MLPSpec,
    Project,
    RunSettings,
)

names = st.from_regex(r"[a-z][a-z0-9_\-]{0,10}", fullmatch=True)
pos_float = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)
fraction = st.floats(min_value=0.01, max_value=1.0)


@st.composite
def curves(draw) -> EfficiencyCurve:
    n = draw(st.integers(1, 4))
    sizes = sorted(draw(st.sets(st.floats(1.0, 1e15), min_size=n, max_size=n)))
    return EfficiencyCurve(points=[(s, draw(fraction)) for s in sizes])


@st.composite
def memories(draw, edge: bool = False) -> Memory:
    return Memory(
        name=draw(names),
        kind=draw(st.sampled_from(["sram", "hbm", "ddr", "gddr", "hmc"])),
        capacity_bytes=draw(pos_float),
        bandwidth_bytes_per_s=draw(pos_float),
        latency_s=draw(st.floats(0, 1e-3)),
        efficiency=draw(fraction),
        attach=draw(st.lists(st.sampled_from(["west", "east", "north", "south"]), max_size=2, unique=True))
        if edge
        else [],
    )


@st.composite
def computes(draw) -> Compute:
    dtypes = draw(st.lists(st.sampled_from(["fp32", "bf16", "fp16", "fp8"]), min_size=1, max_size=3, unique=True))
    return Compute(
        peak_flops={d: draw(pos_float) for d in dtypes},
        efficiency=draw(st.none() | curves()),
        pe_array=draw(st.none() | st.tuples(st.integers(1, 256), st.integers(1, 256))),
    )


@st.composite
def interconnects(draw) -> Interconnect:
    return Interconnect(
        topology=draw(st.sampled_from(["mesh", "torus", "ring", "switch", "fat-tree", "fully-connected", "htree"])),
        link_bandwidth_bytes_per_s=draw(pos_float),
        link_latency_s=draw(st.floats(0, 1e-4)),
        efficiency=draw(fraction),
    )


@st.composite
def components(draw, depth: int = 0) -> Component:
    leaf = depth >= 2 or draw(st.booleans())
    kind = draw(st.sampled_from(["system", "node", "wafer", "chip", "die", "tile"]))
    if leaf:
        mems = draw(st.lists(memories(), max_size=2, unique_by=lambda m: m.name))
        return Component(
            name=draw(names),
            kind=kind,
            rows=draw(st.integers(1, 8)),
            cols=draw(st.integers(1, 8)),
            compute=draw(computes()),
            memories=mems,
            power_w=draw(st.none() | st.floats(0, 1e3)),
        )
    children = draw(st.lists(components(depth + 1), min_size=1, max_size=2, unique_by=lambda c: c.name))
    mems = draw(st.lists(memories(edge=True), max_size=1))
    return Component(
        name=draw(names),
        kind=kind,
        rows=draw(st.integers(1, 4)),
        children=children,
        interconnect=draw(interconnects()),
        memories=mems,
    )


@st.composite
def workloads(draw):
    which = draw(st.sampled_from(["gpt", "llama", "cnn", "mlp"]))
    if which in ("gpt", "llama"):
        heads = draw(st.sampled_from([1, 2, 4, 8]))
        hidden = heads * draw(st.integers(1, 64))
        dims = dict(layers=draw(st.integers(1, 8)), hidden=hidden, heads=heads, seq_len=draw(st.integers(1, 4096)))
        return GPTSpec(**dims) if which == "gpt" else LlamaSpec(**dims, kv_heads=draw(st.sampled_from([1, heads])))
    if which == "cnn":
        return CNNSpec(arch=draw(st.sampled_from(["alexnet", "vgg-a", "resnet50", "lenet"])))
    return MLPSpec(layer_sizes=draw(st.lists(st.integers(1, 4096), min_size=2, max_size=5)))


@st.composite
def projects(draw) -> Project:
    tp, pp, dp, mb = (draw(st.integers(1, 4)) for _ in range(4))
    mapping = Mapping(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=mb * dp * draw(st.integers(1, 8)),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        sequence_parallel=draw(st.booleans()),
        zero=draw(st.integers(0, 1)),
    )
    run = RunSettings(
        mode=draw(st.sampled_from(["train", "infer"])),
        dtype=draw(st.sampled_from(["fp32", "bf16", "fp16", "fp8"])),
        engine=draw(st.sampled_from(["event", "analytic"])),
    )
    return Project(
        name=draw(st.text(max_size=20)),
        hardware=draw(components()).model_copy(update={"rows": 1, "cols": 1}),
        workload=draw(workloads()),
        mapping=mapping,
        run=run,
    )

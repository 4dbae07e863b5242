"""One-line descriptions of components with their key figures and units, shared by canvas labels,
the outline's tooltips and (later) reports: "gpu · chip · 312 TFLOP/s bf16 · 80 GB HBM".
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator

from tilewright.engine.hardware import HardwareGraph, elaborate
from tilewright.engine.hardware.model import MemoryPort, index_label
from tilewright.engine.ir.common import DType
from tilewright.engine.ir.hardware import Component, Interconnect, Memory
from tilewright.studio.units import BYTES_PER_S, FLOPS, SECONDS, format_bytes, format_value, plural

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


PortFigures = tuple[tuple[tuple[str, float], ...], tuple[tuple[str, int], ...]]
_FIGURES: dict[str, PortFigures] = {}  # one instance's JSON → its figures; insertion order = age
_CACHE_SIZE = 128
_LOCK = threading.Lock()  # the opening worker fills the cache the GUI thread reads


def instance_memory(component: Component) -> dict[str, float]:
    """Bytes of memory in ONE instance of ``component``, by memory kind, as the engine counts them: the
    capacities of the memory ports of its elaborated hardware graph — what ``engine.perf.device.
    device_capacity`` shares out among the devices — so a caption and a run never disagree (an edge
    memory has a port per edge segment, each holding ``capacity_bytes``). Cached per design: elaborating
    a 4,096-tile wafer takes a fifth of a second (see ``remember_instances`` for large systems)."""
    return dict(_ports(_one_instance(component))[0])


def own_ports(component: Component, memory: Memory) -> int:
    """How many ports the engine gives ``memory`` of ONE instance of ``component`` (1 when it cannot
    elaborate the component)."""
    return dict(_ports(_one_instance(component))[1]).get(memory.name, 1)


def remember_instances(graph: HardwareGraph) -> None:
    """Cache the figures of every design in ``graph`` from the graph itself, not by elaborating each
    design again: one instance of a design has the same memory ports wherever it sits, so its figures
    are those of the ports under its first instance in ``graph``. For a 512 × 512-tile wafer this saves
    two elaborations of ~10 s each (the wafer's, the die's) on top of the system's."""
    by_owner: dict[str, list[MemoryPort]] = {}
    for port in graph.memory_ports:
        by_owner.setdefault(port.owner, []).append(port)
    owners = sorted(by_owner)  # a subtree's owners sort together, right after its root's path
    for component, path in _first_instances(graph.root, graph.root.name):
        key = _one_instance(component)
        if key not in _FIGURES:
            lo = bisect.bisect_left(owners, path)
            hi = bisect.bisect_left(owners, path + "0")  # "/" + 1: past every path under ``path + "/"``
            inside = [o for o in owners[lo:hi] if o == path or o.startswith(path + "/")]
            _store(key, _figures([p for o in inside for p in by_owner[o]], path))


def _first_instances(component: Component, path: str) -> Iterator[tuple[Component, str]]:
    """Every design in the tree with the path of its first instance (as ``Builder.walk`` names it)."""
    yield component, path
    for child in component.children:
        yield from _first_instances(child, f"{path}/{child.name}{index_label(child.rows, child.cols, 0, 0)}")


def _one_instance(component: Component) -> str:
    return component.model_copy(update={"rows": 1, "cols": 1, "growable": False}).model_dump_json()


def _store(key: str, figures: PortFigures) -> PortFigures:
    with _LOCK:
        _FIGURES[key] = figures
        while len(_FIGURES) > _CACHE_SIZE:
            del _FIGURES[next(iter(_FIGURES))]
    return figures


def _ports(component_json: str) -> PortFigures:
    """(bytes by memory kind, ports of the root's own memories by name) of one elaborated instance."""
    cached = _FIGURES.get(component_json)
    if cached is not None:
        return cached
    component = Component.model_validate_json(component_json)
    try:
        ports = elaborate(component).memory_ports
    except ValueError:  # not a system the engine can build (yet): the memories as declared
        return _store(component_json, (tuple(_declared_memory(component).items()), ()))
    return _store(component_json, _figures(ports, component.name))


def _figures(ports: Iterable[MemoryPort], owner: str) -> PortFigures:
    """Bytes by memory kind of ``ports``, and how many of them belong to ``owner``'s own memories."""
    by_kind: dict[str, float] = {}
    own: dict[str, int] = {}
    for port in ports:
        by_kind[port.memory.kind.value] = by_kind.get(port.memory.kind.value, 0.0) + port.capacity_bytes
        if port.owner == owner:
            own[port.memory.name] = own.get(port.memory.name, 0) + 1
    return tuple(by_kind.items()), tuple(own.items())


def _declared_memory(component: Component) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in component.memories:
        out[m.kind.value] = out.get(m.kind.value, 0.0) + m.capacity_bytes
    for child in component.children:
        for kind, size in _declared_memory(child).items():
            out[kind] = out.get(kind, 0.0) + child.count * size
    return out


def key_figures(component: Component) -> list[str]:
    """Peak compute and memory of ONE instance, each with its unit."""
    figures: list[str] = []
    dtype = headline_dtype(component) or _first_dtype(component)
    if dtype is not None:
        figures.append(f"{format_value(_instance_peak(component, dtype), FLOPS)} {dtype.value}")
    for kind, size in sorted(instance_memory(component).items(), key=lambda kv: -kv[1]):
        figures.append(f"{format_bytes(size)} {kind.upper()}")
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


def memory_caption(m: Memory, ports: int = 1) -> str:
    """ "dram · HBM · 16 ports × 16 GiB = 256 GiB · 410 GB/s per port": an edge memory's ``capacity_bytes``
    and bandwidth are per port, and the engine gives it ``ports`` ports (``own_ports``)."""
    size = format_bytes(m.capacity_bytes)
    if m.attach and ports > 1:
        size = f"{ports} {plural('port', ports)} × {size} = {format_bytes(ports * m.capacity_bytes)}"
    per = " per port" if m.attach else ""
    return f"{m.name} · {m.kind.value.upper()} · {size} · {format_value(m.bandwidth_bytes_per_s, BYTES_PER_S)}{per}"

"""Rows of the traffic table under the link view: the chosen op's NoC multicast and DRAM bytes on its grid
device, and every DRAM port's load over the run (``Result.dram_ports``). Text with units; no Qt.

An op's DRAM time here is its bytes over the device's interleaved bandwidth (the bound the cost model
uses, ``GridChip.dram_read_Bps``), not the op's time: compute and multicast overlap it. A port's
utilisation is its bytes over its channel's bandwidth times the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilewright.studio.model.core_grid import CoreUse
from tilewright.studio.model.split_traffic import format_traffic, multicast_loads, op_dram
from tilewright.studio.units import BYTES_PER_S, SECONDS, format_percent, format_value


@dataclass(frozen=True)
class TrafficRow:
    what: str
    amount: str  # bytes, with unit
    rate: str  # bandwidth or utilisation, with unit
    note: str = ""


def op_rows(use: CoreUse, grid_rows: int, grid_cols: int) -> list[TrafficRow]:
    """Per operand: its multicast links and bytes per link; then the op's DRAM reads and writes."""
    s, g = use.shape, use.gemm
    if s is None or g is None:
        return [TrafficRow(f"{use.label}", "—", "—", "the split or the op's GEMM could not be read back")]
    loads = multicast_loads(grid_rows, grid_cols, s, g)
    out = []
    direction = {"2d": {"A": "east along each used row", "B": "south down each used column"}}
    for operand in ("A", "B"):
        mine = [ld.nbytes for ld in loads if ld.operand == operand]
        if not mine:
            continue
        how = direction.get(s.kind, {}).get(operand, "from core (0, 0) to every used core")
        out.append(
            TrafficRow(
                f"NoC multicast {operand} ({g.fmt_a if operand == 'A' else g.fmt_b})",
                f"{format_traffic(max(mine))} per link",
                f"{len(mine)} links · {format_traffic(sum(mine))} link-bytes",
                f"{how}; once per link",
            )
        )
    d = op_dram(s, g)
    interleaved = f"{use.dram_name}: pages interleaved over all its banks" if use.dram_name else "no DRAM"
    b_bps, b_how = use.dram_read_bps, interleaved
    if s.b_sharded:
        b_bps, b_how = use.dram_local_bps, f"{use.dram_name}: DRAM-sharded, each core reads the bank beside it"
    for what, nbytes, bps, how in (
        ("DRAM read A", d.read_a, use.dram_read_bps, interleaved),
        ("DRAM read B", d.read_b, b_bps, b_how),
        ("DRAM write C", d.write, use.dram_write_bps, interleaved),
    ):
        rate = f"{format_value(nbytes / bps, SECONDS)} at {format_value(bps, BYTES_PER_S)}" if bps > 0 else "—"
        out.append(TrafficRow(what, format_traffic(nbytes), rate, how))
    return out


def port_utilisation(p: dict[str, Any], span_s: float) -> float:
    """A port's busier direction: its bytes over its channel's bandwidth times the run's length."""
    utils = [
        p[f"{d}_bytes"] / (p[f"{d}_bandwidth_bytes_per_s"] * span_s)
        for d in ("read", "write")
        if p[f"{d}_bandwidth_bytes_per_s"] > 0 and span_s > 0
    ]
    return max(utils, default=0.0)


def port_rows(ports: list[dict[str, Any]], span_s: float, root: str = "") -> list[TrafficRow]:
    """Every DRAM port, busiest first: read and write bytes, utilisation of its busier direction."""
    out = []
    for p in sorted(ports, key=lambda p: -(p["read_bytes"] + p["write_bytes"])):
        name = p["port"].replace(root, "", 1) if root else p["port"]
        out.append(
            TrafficRow(
                name,
                f"read {format_traffic(p['read_bytes'])} · write {format_traffic(p['write_bytes'])}",
                f"{format_percent(port_utilisation(p, span_s))} busiest direction",
                f"{p['memory']}, {p['interleave']}",
            )
        )
    return out


def port_spread(ports: list[dict[str, Any]]) -> str:
    """One line on the ports' spread, e.g. "80 DRAM ports (nearest): 28.9 TB … 35.9 TB each, busiest 1.24×
    the least busy" — even when interleaved, uneven when each device uses its nearest port."""
    if not ports:
        return ""
    totals = [p["read_bytes"] + p["write_bytes"] for p in ports]
    kinds = ", ".join(sorted({str(p["interleave"]) for p in ports}))
    lo, hi = min(totals), max(totals)
    ratio = f"busiest {hi / lo:.3g}× the least busy" if lo > 0 else "some ports unused"
    return f"{len(ports)} DRAM ports ({kinds}): {format_traffic(lo)} … {format_traffic(hi)} each, {ratio}"


def port_loads(ports: list[dict[str, Any]], owner: str, span_s: float) -> dict[str, str]:
    """Per port of the instance ``owner`` ("palm-wafer/die[0,0]"), by its name there ("dram@west[0]"): its
    bytes read and written over the run and the utilisation of its busier direction, for the port box."""
    out = {}
    for p in ports:
        head, _, name = str(p["port"]).rpartition("/")
        if head != owner:
            continue
        out[name] = (
            f"read {format_traffic(p['read_bytes'])} · write {format_traffic(p['write_bytes'])} · "
            f"{format_percent(port_utilisation(p, span_s))} busy"
        )
    return out

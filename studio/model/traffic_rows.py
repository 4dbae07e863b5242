"""Rows of the traffic table under the link view: the chosen op's NoC multicast and DRAM bytes on its grid
device, and every DRAM port's load over the run (``Result.dram_ports``). Text with units; no Qt, and no
byte count of its own: the op's bytes are the engine's (``SplitRecord.traffic``, ``perf.spatial_traffic``).

An op's DRAM time here is its bytes over the device's interleaved bandwidth (the bound the cost model
uses, ``GridChip.dram_read_Bps``), not the op's time: compute and multicast overlap it. A port's
utilisation is its bytes over its channel's bandwidth times the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilewright.studio.model.core_grid import CoreUse
from tilewright.studio.model.split_traffic import format_traffic
from tilewright.studio.units import BYTES_PER_S, SECONDS, format_percent, format_value

BUSIEST_LINKS = 3  # the op's busiest NoC links listed by name


@dataclass(frozen=True)
class TrafficRow:
    what: str
    amount: str  # bytes, with unit
    rate: str  # bandwidth or utilisation, with unit
    note: str = ""


def op_rows(use: CoreUse) -> list[TrafficRow]:
    """Per operand: its multicast links and bytes per link (the engine's trees); the busiest link; then the
    op's DRAM reads and writes, each at the bandwidth the cost model reads it with."""
    rec = use.record
    if rec is None:
        return [TrafficRow(f"{use.label}", "—", "—", "the split or the op's GEMM could not be read back")]
    s, t = rec.split, rec.traffic
    out = []
    direction = {"2d": {"A": "east along each used row", "B": "south down each used column"}}
    formats = {"A": rec.problem.fmt_a, "B": rec.problem.fmt_b}
    for operand in ("A", "B"):
        loads = t.link_loads(operand)
        if not loads:
            continue
        trees = [tr for tr in t.trees if tr.operand == operand]
        how = direction.get(s.kind, {}).get(operand, "from core (0, 0) along row 0, then down every used column")
        out.append(
            TrafficRow(
                f"NoC multicast {operand} ({formats[operand]})",
                f"{format_traffic(max(loads.values()))} per link",
                f"{len(loads)} links · {format_traffic(t.multicast_link_bytes(operand))} link-bytes",
                f"{how}; {len(trees)} tree{'s' if len(trees) > 1 else ''}, once per link, "
                f"depth {max(tr.depth for tr in trees)} hops",
            )
        )
    by_operand = {o: t.link_loads(o) for o in ("A", "B")}
    ranked = sorted(t.link_loads().items(), key=lambda kv: -kv[1])
    for i, ((a, b), nbytes) in enumerate(ranked[:BUSIEST_LINKS]):
        on = [o for o in ("A", "B") if (a, b) in by_operand[o]]
        parts = " + ".join(f"{o} {format_traffic(by_operand[o][(a, b)])}" for o in on)
        out.append(TrafficRow("NoC busiest link" if i == 0 else f"NoC link #{i + 1}", format_traffic(nbytes),
                              f"core {a} → {b}", f"{parts} over the op"))
    d = t.dram
    chip = rec.chip
    name = rec.dram.name if rec.dram is not None else ""
    read_bps = chip.dram_read_Bps() if chip.has_dram else 0.0
    write_bps = chip.dram_write_Bps() if chip.has_dram else 0.0
    interleaved = f"{name}: pages interleaved over all its banks" if chip.has_dram else "no DRAM"
    b_bps, b_how = read_bps, interleaved
    if rec.b_sharded and chip.has_dram:
        b_bps = chip.dram_read_Bps(interleaved=False)
        b_how = f"{name}: DRAM-sharded, each core reads the bank beside it"
    for what, nbytes, bps, how in (
        ("DRAM read A", d.read_a, read_bps, interleaved),
        ("DRAM read B", d.read_b, b_bps, b_how),
        ("DRAM write C", d.write, write_bps, interleaved),
    ):
        rate = f"{format_value(nbytes / bps, SECONDS)} at {format_value(bps, BYTES_PER_S)}" if bps > 0 else "—"
        out.append(TrafficRow(what, format_traffic(nbytes), rate, how))
    ports = t.port_bytes()
    if ports and d.total > 0:
        share = max(ports) / sum(ports)
        out.append(TrafficRow(f"DRAM ports ({len(ports)})", f"{format_traffic(max(ports))} busiest port",
                              f"{format_percent(share)} of the op's DRAM bytes",
                              "a device's own DRAM is one port; pages interleaved over its banks"))
    return out


def port_utilisation(p: dict[str, Any], span_s: float) -> float:
    """A port's busier direction: its bytes over its channel's bandwidth times the run's length. A device's
    own DRAM (no direction: ``read_bytes`` None) is priced against the memory's achievable bandwidth, which
    its read channel carries: its total bytes over that."""
    if span_s <= 0:
        return 0.0
    if p["read_bytes"] is None:
        bandwidth = p["read_bandwidth_bytes_per_s"]
        return p["bytes"] / (bandwidth * span_s) if bandwidth > 0 else 0.0
    utils = [
        p[f"{d}_bytes"] / (p[f"{d}_bandwidth_bytes_per_s"] * span_s)
        for d in ("read", "write")
        if p[f"{d}_bandwidth_bytes_per_s"] > 0
    ]
    return max(utils, default=0.0)


def port_total(p: dict[str, Any]) -> float:
    """Bytes through a port over the run, read and written."""
    return p["bytes"] if p["read_bytes"] is None else p["read_bytes"] + p["write_bytes"]


def one_total(p: dict[str, Any]) -> bool:
    """Whether a port's traffic is shown as one total rather than read and write apart: a device's own DRAM
    (the cost model does not tell its reads from its writes) and a ported memory whose write channel carried
    nothing. The engine times every DRAM stream as a read (``engine/hardware/interleave.py``
    ``stream_usage``), so "write 0 B" on every port of a training run said activations, gradients and the
    optimizer update were never written; they were, timed on the read channel."""
    return p["read_bytes"] is None or not p["write_bytes"]


def port_amount(p: dict[str, Any]) -> str:
    """"read 1.2 TB · write 30 GB" when the write channel carried traffic, else "1.77 TB read + written"
    (a device's own DRAM, or a port whose streams the engine all timed as reads: ``one_total``)."""
    if one_total(p):
        return f"{format_traffic(port_total(p))} read + written"
    return f"read {format_traffic(p['read_bytes'])} · write {format_traffic(p['write_bytes'])}"


def _busy_where(p: dict[str, Any]) -> str:
    """What a port's utilisation is a share of."""
    if p["read_bytes"] is None:
        return "of its bandwidth"
    return "of its read channel" if one_total(p) else "busiest direction"


def no_ports_note(engine: str, devices: int) -> str:
    """Why a run lists no DRAM ports, for the engine and the device count that caused it: the per-port
    bytes come from the link series, which the analytic engine never records and which a single device,
    with no links to others, does not have either (the n150's event run used to read "the analytic engine
    records no links")."""
    if engine == "analytic":
        why = "the analytic engine records no link series, and the per-port bytes are read from them"
    elif devices == 1:
        why = ("one device has no links to others, so the run records no link series to read per-port bytes "
               "from; its own DRAM is priced inside each op")
    else:
        why = "this run recorded no traffic through a DRAM port"
    return f"DRAM ports: no per-port traffic in this run ({why}) — choose an op on the canvas for its DRAM bytes"


def port_rows(ports: list[dict[str, Any]], span_s: float, root: str = "") -> list[TrafficRow]:
    """Every DRAM port, busiest first: read and write bytes, utilisation of its busier direction (of its
    bandwidth, for a device's own DRAM)."""
    out = []
    for p in sorted(ports, key=lambda p: -port_total(p)):
        name = p["port"].replace(root, "", 1) if root else p["port"]
        note = f"{p['memory']}, {p['interleave']}"
        if p["read_bytes"] is not None and one_total(p) and port_total(p) > 0:
            note += "; writes timed on the read channel"
        out.append(
            TrafficRow(name, port_amount(p), f"{format_percent(port_utilisation(p, span_s))} {_busy_where(p)}", note)
        )
    return out


def port_spread(ports: list[dict[str, Any]]) -> str:
    """One line on the ports' spread, e.g. "80 DRAM ports (nearest): 28.9 TB … 35.9 TB each, busiest 1.24×
    the least busy" — even when interleaved, uneven when each device uses its nearest port."""
    if not ports:
        return ""
    totals = [port_total(p) for p in ports]
    kinds = ", ".join(sorted({str(p["interleave"]) for p in ports}))
    lo, hi = min(totals), max(totals)
    if hi <= 0:
        return f"{len(ports)} DRAM ports ({kinds}): the run recorded no bytes through any of them"
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
        out[name] = f"{port_amount(p)} · {format_percent(port_utilisation(p, span_s))} busy"
    return out

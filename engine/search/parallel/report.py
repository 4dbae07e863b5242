"""Plain-text tables of search results (the JSON forms live beside each search)."""

from __future__ import annotations

from tilewright.engine.results.text import number
from tilewright.engine.search.parallel.candidate import Candidate, modules_text
from tilewright.engine.search.parallel.ranking import SearchResult

GIB = 2**30


def sharding_text(c: Candidate) -> str:
    """The second stage's dimensions of a candidate (ep, expert tp, the MoE dispatcher, cp, FSDP, offload,
    every overlap, the modules selective recomputation re-runs when not Megatron-Core's default), '-' for
    none: every option in which two rows of the table can differ is named, or equal-looking rows would
    differ in time for no visible reason."""
    parts = [f"ep{c.ep}"] if c.ep > 1 else []
    parts += [f"etp{c.expert_tp}"] if c.expert_tp is not None and c.expert_tp != c.tp else []
    parts += [c.dispatcher] if c.dispatcher != "alltoall" else []
    parts += [f"cp{c.cp}"] if c.cp > 1 else []
    parts += ["fsdp"] if c.fsdp else []
    parts += [f"opt->{c.offload}"] if c.offload is not None else []
    parts += ["ovl-grad"] if c.overlap_grad_reduce else []
    parts += ["ovl-a2a"] if c.overlap_ep else []
    parts += ["dw"] if c.delay_wgrad else []
    parts += ["ovl-tp"] if c.overlap_tp else []
    parts += [f"rc:{modules_text(c.recompute_modules)}"] if c.recompute_modules is not None else []
    return " ".join(parts) or "-"


def _placement(c: Candidate) -> str:
    return c.placement.value + ("" if c.rank_order == "tp-dp-pp" else f"/{c.rank_order}")


def column_note(result: SearchResult) -> str:
    """What the time columns are and which one orders the rows: the fast estimate ranks every candidate
    (and gives samples/s and memory); the event engine re-simulates the first few with contention and
    orders those among themselves by its time."""
    confirmed = sum(r.event is not None for r in result.ranked)
    text = "fast: the search's estimate, which ranks the candidates (samples/s = global batch / fast)"
    if not confirmed:
        return text + "; event: not simulated"
    head = "#1" if confirmed == 1 else f"#1–#{confirmed}"
    return text + f"; event: {head} re-simulated on the event engine (with contention) and ordered by its time"


def search_text(result: SearchResult) -> str:
    lines = [
        f"parallelism search: {result.devices:,} devices available, global batch {result.global_batch:,}",
        f"  space {result.space:,} candidates; {result.evaluated:,} evaluated, {result.feasible:,} fit in memory, "
        f"{result.timed:,} timed, {result.extended:,} in the second stage (ep, cp, ZeRO-2/3, FSDP, offload, "
        "overlap, recompute modules);"
        f" search {result.search_time_s:.1f} s, total {result.wall_time_s:.1f} s",
    ]
    if not result.ranked:
        lines.append("  no mapping fits in memory")
        return "\n".join(lines)
    # the text columns as wide as their widest cell, so a long tag set shifts no column after it
    places = [_placement(r.candidate) for r in result.ranked]
    shards = [sharding_text(r.candidate) for r in result.ranked]
    pw, sw = max(20, *map(len, places)), max(16, *map(len, shards))
    rw = max(9, *(len(r.candidate.recompute.value) for r in result.ranked))
    header = (
        f"  {'#':>2}  {'tp':>3} {'pp':>3} {'dp':>4} {'dev':>5} {'mb':>3} {'v':>2} {'recompute':<{rw}} {'sp':<3} "
        f"{'zero':>4}  {'placement':<{pw}} {'sharding':<{sw}} "
        f"{'fast (s)':>9} {'samples/s':>10} {'event (s)':>9} {'mem GiB':>7}"
    )
    lines.append(header)
    for i, (r, place, shard) in enumerate(zip(result.ranked, places, shards, strict=True), start=1):
        c = r.candidate
        event = f"{r.event.iteration_time_s:9.3f}" if r.event is not None else f"{'-':>9}"
        t = r.iteration_time_s  # samples/s beside the time it comes from: the fast estimate's
        rate = number(result.global_batch / t) if t > 0 else "-"
        lines.append(
            f"  {i:>2}  {c.tp:>3} {c.pp:>3} {c.dp:>4} {c.devices:>5} {c.micro_batch:>3} {c.interleave:>2} "
            f"{c.recompute.value:<{rw}} {'yes' if c.sequence_parallel else 'no':<3} {c.zero:>4}  {place:<{pw}} "
            f"{shard:<{sw}} "
            f"{t:9.3f} {rate:>10} {event} {r.peak_memory_bytes / GIB:7.1f}"
        )
    lines.append(f"  {column_note(result)}")
    lines += [f"  note: {n}" for n in result.notes]
    best = result.ranked[0]
    if best.spatial_splits:  # grid devices: how #1 spreads each op over a chip's cores (stage 0)
        lines.append(f"  #1 per chip ({best.candidate.label()}), spatial split of each forward op:")
        where = best.spatial_splits[0]["where"]
        for row in best.spatial_splits:
            if row["where"] == where:
                lines.append(f"    {where}: {row['count']} × {row['op']}: {row['split']}")
    return "\n".join(lines)

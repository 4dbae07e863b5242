"""DRAM port rows in the Links tab say what the engine measured: one total where the write channel carried
nothing (every DRAM stream is timed as a read), and the true reason when a run lists no ports."""

from __future__ import annotations

from tilewright.studio.model.split_traffic import format_traffic
from tilewright.studio.model.traffic_rows import port_rows
from tilewright.studio.units import format_percent


def _ported(read: float, write: float) -> dict:
    return {"port": "w/die[0,0]/dram@west[0]", "memory": "dram", "owner": "w/die[0,0]", "interleave": "nearest",
            "read_bandwidth_bytes_per_s": 1e12, "write_bandwidth_bytes_per_s": 5e11, "read_bytes": read,
            "write_bytes": write, "bytes": read + write}


def test_a_port_whose_writes_were_timed_as_reads_shows_one_total_not_write_0_b():
    """The engine times every DRAM stream on the read channel: "write 0 B" read as "nothing is written"."""
    (row,) = port_rows([_ported(3e12, 0.0)], 10.0)
    assert row.amount == f"{format_traffic(3e12)} read + written" and "write" not in row.amount.split("+")[0]
    assert row.rate == f"{format_percent(3e12 / (1e12 * 10.0))} of its read channel"
    assert "writes timed on the read channel" in row.note
    # a write channel that did carry traffic keeps the two directions apart, busier one's utilisation
    (split,) = port_rows([_ported(1e12, 4e12)], 10.0)
    assert split.amount == f"read {format_traffic(1e12)} · write {format_traffic(4e12)}"
    assert split.rate == f"{format_percent(4e12 / (5e11 * 10.0))} busiest direction"


def test_no_ports_note_gives_the_true_reason():
    from tilewright.studio.model.traffic_rows import no_ports_note

    one = no_ports_note("event", 1)
    assert "one device" in one and "analytic" not in one  # the n150's event run said "the analytic engine"
    assert "analytic engine" in no_ports_note("analytic", 64)
    many = no_ports_note("event", 64)
    assert "analytic" not in many and "one device" not in many


def test_link_names_elide_in_the_middle_so_both_ends_show(qtbot):
    from PySide6.QtCore import Qt
    from tilewright.studio.ui.results.links_view import LinksView
    from tilewright.studio.ui.results.time_cursor import TimeCursor

    view = LinksView(TimeCursor())
    qtbot.addWidget(view)
    assert view.list.textElideMode() == Qt.TextElideMode.ElideMiddle
    assert view.list.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff

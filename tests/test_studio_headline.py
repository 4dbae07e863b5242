"""The results headline fits its dock by dropping whole facts and showing "…": at 1280 × 720 an
out-of-memory headline was cut mid-word ("peak r"), a figure without its unit."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.studio.ui.results.headline_label import ELLIPSIS, SEPARATOR, HeadlineLabel  # noqa: E402

LINE = ("<span style='color:#c0392b'><b>OUT OF MEMORY</b> on palm-wafer/die[0,0]/tile[0,0]: needs 74.7 GiB, "
        "has 2 GiB</span> · <b>palm-wafer-t18b</b> · train · event engine · 320 devices — <b>243 s</b> per "
        "iteration · 4.4 samples/s · 9.01 ktokens/s · MFU 20.5 % · peak memory 74.7 GiB")


def test_a_narrow_headline_drops_whole_facts(qtbot):
    label = HeadlineLabel()
    qtbot.addWidget(label)
    label.resize(3000, 26)
    label.show()
    label.setText(LINE)
    assert label.shown_text() == LINE and label.text() == LINE
    facts = LINE.split(SEPARATOR)
    for width in (1100, 700, 400):
        label.resize(width, 26)
        shown = label.shown_text()
        assert shown.endswith(ELLIPSIS), width
        kept = shown[: -len(ELLIPSIS)].split(SEPARATOR)
        assert kept == facts[: len(kept)]  # a prefix of whole facts: every number keeps its unit
        assert label.text() == LINE  # what Copy and the tooltip read stays whole
    label.resize(3000, 26)
    assert label.shown_text() == LINE


def test_a_headline_that_fits_is_shown_whole(qtbot):
    label = HeadlineLabel()
    qtbot.addWidget(label)
    label.resize(800, 26)
    label.show()
    label.setText("<b>gpt3</b> · train · 13.1 s per iteration")
    assert label.shown_text() == label.text()

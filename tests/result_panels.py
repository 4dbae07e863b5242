"""A shown results panel after a run of the synthetic tiny result, every view filled: what the result-view
tests start from."""

from __future__ import annotations

from tilewright.studio.model.run_record import prepare_record
from tilewright.studio.samples import dgx_project
from tilewright.studio.ui.results.synthetic import tiny_result
from tilewright.studio.ui.results_panel import ResultsPanel


def filled_panel(qtbot) -> ResultsPanel:  # noqa: ANN001 - pytest-qt's fixture
    panel = ResultsPanel()
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    record = prepare_record(dgx_project(), tiny_result(), 0.5)
    panel.show_result(record.result, 0.5)
    panel.show_record(record)
    panel.flush()
    return panel

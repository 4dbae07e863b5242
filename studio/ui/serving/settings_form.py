"""The serving settings, every field with its unit: arrivals (rates or a trace), the scheduler, the
disaggregation split, speculative decoding and the SLO. ``request()`` reads them into the engine's
``ServingConfig`` (wrapped in a ``ServingRequest``) or says which field is wrong and why."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)
from tilewright.engine.serving import ServingConfig, SpecDecoding
from tilewright.studio.model.serving_data import ServingRequest, read_rates
from tilewright.studio.ui.fields import ERROR_STYLE

MAX_REQUESTS = 100_000  # a bound for the spin box; the simulator polls Cancel whatever the size
DEFAULTS = ServingConfig()
TEXT_MARGINS_PX = 16  # a line edit's frame and text margins, both sides


def _spin(value: int, low: int, high: int, suffix: str, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setSuffix(suffix)
    box.setToolTip(tip)
    box.setGroupSeparatorShown(True)
    return box


def _plural(box: QSpinBox, one: str, many: str) -> None:
    """The unit in the singular at 1 ("1 device"), else plural."""

    def update(value: int) -> None:
        box.setSuffix(one if value == 1 else many)

    box.valueChanged.connect(update)
    update(box.value())


def _real(
    value: float, low: float, high: float, suffix: str, decimals: int, step: float, tip: str, off: str = ""
) -> QDoubleSpinBox:
    """A number with its unit; with ``off``, the minimum (0) reads as ``off`` and means "not set"."""
    box = QDoubleSpinBox()
    box.setDecimals(decimals)
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setValue(value)
    box.setSuffix(suffix)
    box.setToolTip(tip)
    if off:
        box.setSpecialValueText(off)
    return box


class ServingForm(QWidget):
    def __init__(self, devices: int = 1, parent: QWidget | None = None):
        super().__init__(parent)
        self.rates = QLineEdit("1")
        self.rates.setToolTip(
            "Poisson arrivals per second; several (1, 2, 4 or 0.5:4:0.5 = start:stop:step) "
            "sweep the rates and mark the highest that meets the SLO"
        )
        self.rates.setPlaceholderText("1, 2, 4  or  0.5:4:0.5")
        self.count = _spin(DEFAULTS.count, 1, MAX_REQUESTS, " requests", "requests simulated per rate")
        self.seed = _spin(DEFAULTS.seed, 0, 2**31 - 1, "", "seed of the arrival times (the same for every rate)")
        self.trace = QLineEdit()
        # "none" fits the field at 1280 × 720 ("none: Poisson arrivals" showed as "none: P…"); the field
        # is never narrower than it, and the tooltip says what "none" means
        self.trace.setPlaceholderText("none")
        self.trace.setMinimumWidth(self.trace.fontMetrics().horizontalAdvance(" none ") + TEXT_MARGINS_PX)
        self.trace.setToolTip(
            "JSON or CSV with arrival_s (s), prompt_tokens and output_tokens per request; "
            "replaces the rates and the request count (none: Poisson arrivals at the rates above)"
        )
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self.prompt = _spin(0, 0, 1_000_000, " tokens", "prompt length of every request")
        self.prompt.setSpecialValueText("the project's")
        self.output = _spin(0, 0, 1_000_000, " tokens", "output length of every request")
        self.output.setSpecialValueText("the project's")
        self.max_batch = _spin(DEFAULTS.max_batch, 1, 1_000_000, " sequences", "running sequences at most")
        self.token_budget = _spin(
            DEFAULTS.token_budget,
            1,
            10_000_000,
            " tokens/iteration",
            "new tokens (prefill + decode) per iteration at most",
        )
        self.chunk = _spin(
            DEFAULTS.chunk,
            1,
            10_000_000,
            " tokens",
            "prompt tokens one sequence prefills per iteration at most (chunked prefill)",
        )
        self.disaggregate = QCheckBox("prefill and decode on separate devices")
        half = max(devices // 2, 1)
        self.prefill_devices = _spin(half, 1, 1_000_000, " devices", "devices of the prefill group")
        self.decode_devices = _spin(max(devices - half, 1), 1, 1_000_000, " devices", "devices of the decode group")
        for box in (self.prefill_devices, self.decode_devices):
            _plural(box, " device", " devices")
        self.speculative = QCheckBox("speculative decoding")
        self.spec_k = _spin(4, 1, 64, " draft tokens", "tokens the draft proposes per verify step")
        self.spec_accept = _real(70.0, 0.0, 100.0, " %", 1, 5.0, "chance the target accepts a draft token")
        self.spec_draft_cost = _real(
            5.0, 0.0, 100.0, " % of a decode step", 1, 1.0, "one draft step's cost next to the target's decode step"
        )
        self.slo_ttft = _real(0.0, 0.0, 1e6, " ms", 1, 50.0, "time-to-first-token target (off: none)", "off")
        self.slo_tpot = _real(0.0, 0.0, 1e6, " ms", 2, 5.0, "time-per-output-token target (off: none)", "off")
        self.error = QLabel()
        self.error.setStyleSheet(ERROR_STYLE)
        self.error.setWordWrap(True)
        self.error.hide()
        self._layout()
        self.disaggregate.toggled.connect(self._enable)
        self.speculative.toggled.connect(self._enable)
        self.trace.textChanged.connect(self._enable)
        self._enable()

    def _layout(self) -> None:
        arrivals = QFormLayout()
        arrivals.addRow("Arrival rate (requests/s)", self.rates)
        arrivals.addRow("Requests per rate", self.count)
        arrivals.addRow("Seed", self.seed)
        trace_row = QHBoxLayout()
        trace_row.addWidget(self.trace, 1)
        trace_row.addWidget(self.browse)
        arrivals.addRow("Trace file", trace_row)
        arrivals.addRow("Prompt length", self.prompt)
        arrivals.addRow("Output length", self.output)
        scheduler = QFormLayout()
        scheduler.addRow("Max batch", self.max_batch)
        scheduler.addRow("Token budget", self.token_budget)
        scheduler.addRow("Prefill chunk", self.chunk)
        scheduler.addRow(self.disaggregate)
        scheduler.addRow("Prefill group", self.prefill_devices)
        scheduler.addRow("Decode group", self.decode_devices)
        scheduler.addRow(self.speculative)
        scheduler.addRow("Draft length", self.spec_k)
        scheduler.addRow("Acceptance rate", self.spec_accept)
        scheduler.addRow("Draft step cost", self.spec_draft_cost)
        slo = QFormLayout()
        slo.addRow("TTFT at most", self.slo_ttft)
        slo.addRow("TPOT at most", self.slo_tpot)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        for title, form in (("Requests", arrivals), ("Scheduler", scheduler), ("Service-level objective", slo)):
            group = QGroupBox(title)
            group.setLayout(form)
            box.addWidget(group)
        box.addWidget(self.error)
        box.addStretch(1)

    def _enable(self) -> None:
        tracing = bool(self.trace.text().strip())
        for w in (self.rates, self.count, self.seed, self.prompt, self.output):
            w.setEnabled(not tracing)
        for w in (self.prefill_devices, self.decode_devices):
            w.setEnabled(self.disaggregate.isChecked())
        for w in (self.spec_k, self.spec_accept, self.spec_draft_cost):
            w.setEnabled(self.speculative.isChecked())

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Request trace", "", "Traces (*.json *.csv);;All files (*)")
        if path:
            self.trace.setText(path)

    def show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(bool(text))

    def request(self) -> ServingRequest | None:
        """The settings as a request, or None with the reason shown under the form."""
        trace = self.trace.text().strip() or None
        rates: list[float] = [1.0]
        if trace is None:
            try:
                rates = read_rates(self.rates.text())
            except ValueError as exc:
                self.show_error(f"Arrival rate: {exc}")
                return None
        spec = None
        if self.speculative.isChecked():
            spec = SpecDecoding(
                self.spec_k.value(), self.spec_accept.value() / 100.0, self.spec_draft_cost.value() / 100.0
            )
        config = ServingConfig(
            rate=rates[0],
            count=self.count.value(),
            seed=self.seed.value(),
            prompt_tokens=self.prompt.value() or None,
            output_tokens=self.output.value() or None,
            max_batch=self.max_batch.value(),
            token_budget=self.token_budget.value(),
            chunk=self.chunk.value(),
            disaggregate=(self.prefill_devices.value(), self.decode_devices.value())
            if self.disaggregate.isChecked()
            else None,
            spec=spec,
            slo_ttft_s=self.slo_ttft.value() / 1e3 or None,
            slo_tpot_s=self.slo_tpot.value() / 1e3 or None,
        )
        problems = config.problems()
        if problems:
            self.show_error("\n".join(f"{_FIELD_NAMES.get(k, k)}: {reason}" for k, reason in problems))
            return None
        self.show_error("")
        return ServingRequest(config, tuple(rates), trace)


_FIELD_NAMES = {
    "rate": "Arrival rate",
    "count": "Requests per rate",
    "max_batch": "Max batch",
    "token_budget": "Token budget",
    "chunk": "Prefill chunk",
    "disaggregate": "Prefill/decode groups",
    "spec_k": "Draft length",
    "spec_accept": "Acceptance rate",
    "spec_draft_cost": "Draft step cost",
    "slo_ttft_s": "TTFT at most",
    "slo_tpot_s": "TPOT at most",
}

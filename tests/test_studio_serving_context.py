"""The serving window serves the lengths its form and its trace give, and holds those — not the project's
own — to the model's context (``plan.context_length``): a 100,000-token prompt typed in the form, or a
trace row past the context, was served with exit 0 where ``tilewright run`` refuses the same lengths."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tilewright.engine.io.presets import load_project_preset  # noqa: E402
from tilewright.engine.plan.context_length import model_context  # noqa: E402
from tilewright.studio.serving_controller import ServingController  # noqa: E402
from tilewright.studio.ui.serving import ServingWindow  # noqa: E402

from tests.serving_doubles import FakeServing  # noqa: E402

H100 = "llama2-70b-h100-inference"


def _window(qtbot, project):
    fake = FakeServing()
    w = ServingWindow(lambda: project, controller=ServingController(simulate=fake.simulate, sweep=fake.sweep))
    qtbot.addWidget(w)
    return w, fake


def _serve(qtbot, w) -> str:
    assert w.serve()
    qtbot.waitUntil(lambda: not w.controller.running, timeout=30_000)
    return w.message.text()


def test_the_forms_prompt_past_the_context_is_refused_and_not_served(qtbot):
    project = load_project_preset(H100)
    context, field = model_context(project.workload)
    w, fake = _window(qtbot, project)
    w.form.prompt.setValue(context)  # the prompt alone fills the context: no room for one output token
    w.form.output.setValue(1)
    text = _serve(qtbot, w)
    assert fake.calls == []
    assert f"{context + 1:,} tokens, past the model's context of {context:,} ({field})" in text, text


def test_the_forms_lengths_replace_the_projects_own(qtbot):
    """A project whose own lengths are past the context serves when the form asks for lengths that fit."""
    project = load_project_preset(H100)
    context, _field = model_context(project.workload)
    inference = project.run.inference.model_copy(update={"prompt_tokens": context, "output_tokens": 8})
    too_long = project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})
    w, fake = _window(qtbot, too_long)
    assert "past the model's context" in _serve(qtbot, w)  # its own lengths, served as they are: refused
    assert fake.calls == []
    w.form.prompt.setValue(context // 2)
    w.form.output.setValue(16)
    _serve(qtbot, w)
    assert len(fake.calls) == 1 and fake.calls[0]["config"].prompt_tokens == context // 2


def test_a_trace_request_past_the_context_is_refused_naming_it(qtbot, tmp_path):
    project = load_project_preset(H100)
    context, _field = model_context(project.workload)
    trace = tmp_path / "trace.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,64,4\n0.5,{context},64\n", encoding="utf-8")
    w, fake = _window(qtbot, project)
    w.form.trace.setText(str(trace))
    text = _serve(qtbot, w)
    assert fake.calls == []
    assert str(trace) in text and "request 2" in text and f"{context + 64:,} tokens" in text, text
    ok = tmp_path / "ok.csv"
    ok.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,64,4\n", encoding="utf-8")
    w.form.trace.setText(str(ok))
    _serve(qtbot, w)
    assert len(fake.calls) == 1

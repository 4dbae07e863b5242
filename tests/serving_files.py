"""What the serve CLI's tests share: a small LLaMA serving project written to a file, and strict JSON reading (the
CLI's ``--json`` must be standard JSON: no NaN or Infinity)."""

from __future__ import annotations

import json
from pathlib import Path

from tilewright.engine.io.project_file import project_to_text
from tilewright.engine.ir import Project

from tests.engine_cases import llama_inference


def strict_json(text: str):
    """``text`` parsed as standard JSON, refusing NaN and Infinity."""

    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def serve_project_file(tmp_path: Path) -> str:
    """A LLaMA project on two replicas (tp 1, dp 2), 128 prompt and 16 output tokens, saved under ``tmp_path``."""
    data = llama_inference().model_dump(mode="json")
    data["run"]["inference"] |= {"prompt_tokens": 128, "output_tokens": 16}
    data["mapping"] |= {"tp": 1, "dp": 2, "global_batch": 2}
    path = tmp_path / "serve.json"
    path.write_text(project_to_text(Project.model_validate(data)))
    return str(path)

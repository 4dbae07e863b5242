"""Open a project, change its hardware and mapping, save it, and check the saved file reads back the same.

    python examples/edit_and_save.py [OUT.json]

Projects are immutable pydantic models; a change is made on the project's plain data (what the file
holds) and validated again, so an edit that breaks the schema fails here with the field and the reason,
exactly as loading a bad file would.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tilewright.engine.errors import InputError
from tilewright.engine.io import load_project, project_from_data, project_to_data, save_project
from tilewright.engine.io.overrides import apply_overrides
from tilewright.engine.io.presets import load_project_preset
from tilewright.engine.simulate import simulate


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "megatron-pp4.json"
    project = load_project_preset("megatron-18b-dgx-a100")
    print(f"opened {project.name}: tp {project.mapping.tp}, pp {project.mapping.pp}, dp {project.mapping.dp}")

    def edit(data: dict, changes: dict) -> dict:
        for path, value in changes.items():  # dotted paths, as `tilewright run --set PATH=VALUE` takes them
            apply_overrides(data, path, value, "edit_and_save.py")
        return data

    quick = {"run.engine": "analytic"}  # the uncontended engine, in a fraction of the time
    before = project_from_data(edit(project_to_data(project), quick), "edit_and_save.py")
    # The same 256 GPUs as a 4-stage pipeline: pp × 4, dp ÷ 4.
    data = edit(project_to_data(project), quick | {"name": "megatron-18b-pp4", "mapping.pp": 4,
                                                   "mapping.dp": project.mapping.dp // 4})
    edited = project_from_data(data, "edit_and_save.py")

    try:  # a bad value is refused with the field and the reason
        apply_overrides(data, "mapping.tp", -1, "edit_and_save.py")
        project_from_data(data, "edit_and_save.py")
    except InputError as exc:
        print(f"refused as expected: {exc}")

    save_project(edited, out)  # atomic: the old file or the new one, never half of it
    again = load_project(out)
    assert again == edited, "a saved project reads back equal"
    print(f"saved {out} ({out.stat().st_size:,} bytes); it reads back equal")

    for p in (before, again):
        result = simulate(p)
        print(f"tp {p.mapping.tp} pp {p.mapping.pp} dp {p.mapping.dp} on {p.mapping.devices} GPUs: "
              f"{result.iteration_time_s:.3f} s per iteration, MFU {100 * result.mfu:.1f} %")


if __name__ == "__main__":
    main()

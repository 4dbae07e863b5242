"""A picture of the serving window after one serving run, for docs and reviews:

    QT_QPA_PLATFORM=offscreen python -m tilewright.studio.ui.serving.snapshot PROJECT OUT.png \\
        [--rates 1,2,4] [--requests 100] [--slo-ttft-ms 1000] [--slo-tpot-ms 100] [--disaggregate P:D]

The window is filled through its own form (as a person would) and serves on its worker, as in the
studio; the script waits for the run to end, then saves the window as a PNG. Exit status 2 for a bad
project or setting (the message names it), 1 when the run failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tilewright.engine.errors import EXIT_BAD_INPUT, InputError

RUN_WAIT_MS = 600_000


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tilewright.studio.ui.serving.snapshot", description=__doc__.split("\n")[0]
    )
    p.add_argument("project", help="a project file or a preset project's name")
    p.add_argument("out", help="the PNG to write")
    p.add_argument("--rates", default="1", help="requests/s: one rate, A,B,C or START:STOP:STEP (default 1)")
    p.add_argument("--requests", type=int, default=100, help="requests per rate (default 100)")
    p.add_argument("--slo-ttft-ms", type=float, default=0.0, help="TTFT target in ms (default none)")
    p.add_argument("--slo-tpot-ms", type=float, default=0.0, help="TPOT target in ms (default none)")
    p.add_argument("--disaggregate", metavar="P:D", help="prefill on P devices, decode on D")
    p.add_argument("--size", default="1600x1000", metavar="WxH")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from tilewright.engine.io.presets import load_project_preset

    try:
        project = load_project_preset(args.project)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    from PySide6.QtCore import QEventLoop, QThreadPool, QTimer
    from PySide6.QtWidgets import QApplication
    from tilewright.studio.exporting import write_image
    from tilewright.studio.ui.serving.window import ServingWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = ServingWindow(lambda: project)
    width, height = (int(x) for x in args.size.lower().split("x"))
    window.resize(width, height)
    form = window.form
    form.rates.setText(args.rates)
    form.count.setValue(args.requests)
    form.slo_ttft.setValue(args.slo_ttft_ms)
    form.slo_tpot.setValue(args.slo_tpot_ms)
    if args.disaggregate:
        prefill, decode = (int(x) for x in args.disaggregate.split(":"))
        form.disaggregate.setChecked(True)
        form.prefill_devices.setValue(prefill)
        form.decode_devices.setValue(decode)
    window.show()
    if not window.serve():
        print(f"{args.project}: {form.error.text()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    loop = QEventLoop()
    window.controller.done.connect(loop.quit)
    QTimer.singleShot(RUN_WAIT_MS, loop.quit)
    loop.exec()
    app.processEvents()
    code = 0
    if window.view is None:
        print(f"{args.project}: {window.message.text()}", file=sys.stderr)
        code = 1
    write_image(window.grab(), Path(args.out))
    print(f"wrote {args.out}: {window.message.text()}")
    window.close()
    QThreadPool.globalInstance().waitForDone(5000)
    return code


if __name__ == "__main__":
    sys.exit(main())

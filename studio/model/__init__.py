"""The studio's Qt-free data about runs: a finished run as the studio keeps it (``run_record``), the numbers
the views and the canvas heat overlay read off a ``Result`` (``metrics``), the Gantt's arrays
(``gantt_data``) and the colours every view agrees on (``palette``). Worker threads build these, the
widgets in ``studio.ui`` only draw them; nothing here imports Qt or ``studio.ui``."""

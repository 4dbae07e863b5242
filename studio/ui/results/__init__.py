"""Result views: Gantt, link utilisation, memory occupancy, run comparison, and the time cursor they share.

The arithmetic lives without Qt in ``studio.model`` (``metrics``, ``gantt_data``, ``palette``,
``run_record``), where the worker threads and the canvas heat overlay use it too; ``compare`` and ``summary``
here turn it into text. The widgets only draw what those modules computed.
"""

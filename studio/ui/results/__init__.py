"""Result views: Gantt, link utilisation, memory occupancy, run comparison, and the time cursor they share.

Modules without Qt (``metrics``, ``gantt_data``, ``palette``, ``record``, ``compare``, ``summary``) hold the
arithmetic, so it is testable without a display and reusable by the canvas heat overlay; the widgets only
draw what those modules computed.
"""

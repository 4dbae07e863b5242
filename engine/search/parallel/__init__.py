"""Parallelism search: the fastest tp × pp × dp × micro-batch × interleave × recompute × ZeRO × placement
mapping of a model on a system, ranked by a fast evaluator and confirmed on the event engine."""

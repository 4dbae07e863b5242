"""The analytic engine: the uncontended recurrence, no event queue (``AnalyticEngine``)."""

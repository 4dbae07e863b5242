"""What both engines and the search share: placement, per-pass costs, schedules, uncontended timing."""

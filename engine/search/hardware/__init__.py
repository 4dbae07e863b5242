"""Hardware search (WHAM): accelerator designs for training under area and power budgets, grown along the
critical path of each pipeline stage's operator graph."""

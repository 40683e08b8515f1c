"""Across runs: a benchmark's history judged run by run (change points, attribution, its plot),
and one run compared with another."""

"""Capacity search: the highest offered load a pipeline sustains within its latency SLO, alone
or next to co-runners, found by bracketing and bisecting over real (or simulated) probes."""

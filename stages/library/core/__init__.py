"""What every stage family shares: the builtin stages (noop, sleep, busy, copy, fail, route),
the model stages' config base and device synchronisation (torch_common), and operator profiling
on sampled queries (profiling)."""

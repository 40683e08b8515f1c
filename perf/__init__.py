"""The benchmark scripts, each printing one JSON line: run from the repository root as
`python -m perf.<name>` (`make perf`, `make soak`); the studies as
`python -m perf.studies.<name>` (`make perf-studies`). The GPU acceptance check of
`make gpu-check` is in tests/gpu/.

A package so that the scripts import their shared helpers (`perf.common`) and each other by
name, and the tests import them the same way, with no `sys.path` edits. Nothing is imported
here: `python -m perf.fidelity` must set its thread variables before torch loads.
"""

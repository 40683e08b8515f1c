"""The code location's assets (capacity's are in bench_defs.capacity): artefacts, model files,
`benchmark_run`, `warehouse` and the report assets."""

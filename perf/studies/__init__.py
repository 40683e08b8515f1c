"""One-off studies of the harness: runs that monkeypatch internals or weigh options against the
one taken (the garbage collector's and the writer's variants, the kernel hints, the default
spec's fields, the hot path's parts). Run as `python -m perf.studies.<name>` (`make
perf-studies`); each prints one JSON line. The regression benchmarks are the modules of `perf/`.
"""

"""Everything that runs a benchmark: the spec, the runtime and its stage library, artefacts,
telemetry, collocation (the launcher and its workers), services, capacity search, the run
directory, the leaf contracts and the `collobench` command (docs/design.md, "Architecture").

This package never imports dagster; torch is imported only inside stages that need it.
"""

"""Everything that runs inside a benchmark: specs, runtime, stage library, telemetry, launcher.

This package never imports dagster; torch is imported only inside stages that need it.
"""

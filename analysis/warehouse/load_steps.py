"""How long each step of a load took (analysis.warehouse.loader.load_runs), in wall and CPU seconds,
so a slow load says which step was slow; perf/analysis_speed.py prints them beside the load's time.

The steps, in order: `read_manifests` (every manifest.json, checked), `register_files` (each
Parquet file's footer read once: rows, columns, and the run_id statistics that prove every row
is the run's), `summaries` (analysis/warehouse/stored_summaries.py, outside the lock), `writer_lock`
(the wait for the warehouse's `<db>.lock`), `connect` (the writer's DuckDB connection), `schema`
(the version check, migrations, and the views when the warehouse was made by other SQL) and
`publish` (the one transaction). CPU seconds are the whole process's (every thread), so a step that
uses both cores shows more CPU than wall time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

STEPS = (
    "read_manifests",
    "register_files",
    "summaries",
    "writer_lock",
    "connect",
    "schema",
    "publish",
)


@dataclass
class LoadSteps:
    """Seconds per step of one or more loads (a step run twice adds up)."""

    wall_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the block as step `name` (one of STEPS), also when it raises."""
        if name not in STEPS:
            raise ValueError(f"unknown load step {name!r}")
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall_s[name] = self.wall_s.get(name, 0.0) + time.perf_counter() - wall
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + time.process_time() - cpu

    def rounded(self, digits: int = 3) -> dict[str, dict[str, float]]:
        """{step: {"wall_s": ..., "cpu_s": ...}} in STEPS order, the steps that ran."""
        return {
            name: {
                "wall_s": round(self.wall_s[name], digits),
                "cpu_s": round(self.cpu_s[name], digits),
            }
            for name in STEPS
            if name in self.wall_s
        }

"""Builders of small run directories with known numbers, written with pyarrow against the
run-directory contract (stages.rundir.SCHEMAS), so each view's expected value is exact; and
read-only queries of a loaded warehouse as rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.warehouse.definitions_db import warehouse_definitions
from analysis.warehouse.reader import run_query
from stages.rundir.tables import SCHEMAS

SECOND_NS = 1_000_000_000
MS_NS = 1_000_000


@dataclass
class RunBuilder:
    """Collects rows per table, then writes merged files (or parts/ chunks) and a manifest."""

    root: Path
    run_id: str
    loadgens: dict[str, str]  # pipeline name -> loadgen.type
    started_at: str = "2026-01-01T00:00:00+00:00"
    status: str = "ok"
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    slo_ms: dict[str, float] = field(default_factory=dict)  # pipeline -> loadgen.slo_ms
    # pipeline -> more loadgen fields of its manifest (e.g. ttft_slo_ms, tpot_slo_ms)
    loadgen_fields: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.root / self.run_id

    def add(self, table: str, trial: int, phase: str, pipeline: str | None, **row: Any) -> None:
        keys = {"run_id": self.run_id, "trial": trial, "phase": phase, "pipeline": pipeline}
        self.rows.setdefault(table, []).append({**keys, **row})

    def uniform_queries(
        self,
        trial: int,
        phase: str,
        pipeline: str,
        count: int,
        window_ns: int,
        start_ns: int,
        issue_delay_ns: int = 50_000,
    ) -> None:
        """`count` ok queries evenly spaced; each takes one gap, so the window (first scheduled
        to last completed) is exactly `window_ns` and every latency is window_ns / count."""
        gap_ns = window_ns // count
        for index in range(count):
            scheduled = start_ns + index * gap_ns
            self.add(
                "queries",
                trial,
                phase,
                pipeline,
                query_id=index,
                scheduled_ns=scheduled,
                issued_ns=scheduled + issue_delay_ns,
                completed_ns=scheduled + gap_ns,
                status="ok",
                samples=1,
                warmup=False,
            )

    def energy_series(
        self,
        trial: int,
        phase: str,
        start_ns: int,
        values_j: list[float | None],
        source: str | None,
        gpu: int | None = None,
        period_ns: int = SECOND_NS,
    ) -> None:
        """A cumulative energy series of one sampler: host rows, or gpu rows when `gpu`."""
        for index, value in enumerate(values_j):
            ts = start_ns + index * period_ns
            if gpu is None:
                self.add(
                    "host_samples",
                    trial,
                    phase,
                    None,
                    ts_ns=ts,
                    scope="host",
                    cpu_util=50.0,
                    energy_j=value,
                    energy_source=source,
                )
            else:
                self.add(
                    "gpu_samples",
                    trial,
                    phase,
                    None,
                    ts_ns=ts,
                    gpu=gpu,
                    power_w=100.0,
                    energy_j=value,
                    energy_source=source,
                )

    def _loadgen(self, name: str, kind: str) -> dict[str, Any]:
        slo = {"slo_ms": self.slo_ms[name]} if name in self.slo_ms else {}
        return {"type": kind, **slo, **self.loadgen_fields.get(name, {})}

    def manifest(self) -> dict[str, Any]:
        return {
            "format_version": 1,
            "run_id": self.run_id,
            "name": self.run_id.split("-", 2)[-1],
            "spec": {
                "name": self.run_id,
                "pipelines": [
                    {"name": name, "loadgen": self._loadgen(name, kind), "stages": []}
                    for name, kind in self.loadgens.items()
                ],
            },
            "spec_hash": "0" * 64,
            "started_at": self.started_at,
            "ended_at": None if self.status == "running" else self.started_at,
            "status": self.status,
        }

    def write(self, as_parts: bool = False, chunks: int = 3) -> Path:
        """Write every table (merged `<table>.parquet`, or `chunks` files under parts/ as a
        run cut short before its merge leaves them) and manifest.json; returns the run dir."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for table, rows in self.rows.items():
            schema = SCHEMAS[table]
            data = {name: [row.get(name) for row in rows] for name in schema.names}
            arrow = pa.Table.from_pydict(data, schema=schema)
            if not as_parts:
                pq.write_table(arrow, self.run_dir / f"{table}.parquet")
                continue
            folder = self.run_dir / "parts" / table
            folder.mkdir(parents=True, exist_ok=True)
            size = -(-arrow.num_rows // chunks)
            for number in range(chunks):
                piece = arrow.slice(number * size, size)
                if piece.num_rows:
                    pq.write_table(piece, folder / f"w-{number:06d}.parquet")
        (self.run_dir / "manifest.json").write_text(json.dumps(self.manifest()))
        return self.run_dir


def rows_of(db_path: Path, sql: str) -> list[dict[str, Any]]:
    columns, rows = run_query(db_path, sql)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def one(db_path: Path, sql: str) -> dict[str, Any]:
    found = rows_of(db_path, sql)
    assert len(found) == 1, found
    return found[0]


def definition_rows_of(db_path: Path, sql: str) -> list[dict[str, Any]]:
    """`sql` over the loader's definitions (`*_from_rows` views, which the warehouse does not
    list) of every run loaded in the warehouse at db_path."""
    with warehouse_definitions(db_path) as connection:
        result = connection.execute(sql)
        columns = [column[0] for column in result.description or []]
        return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]

"""The run directory contract: table schemas, crash-safe chunk files, and their final merge.

While a run is live, every process writes its rows as small Parquet chunk files under
`parts/<table>/` (each written to a temporary name, then renamed, so a crash leaves only whole
files). When the run ends, `merge_parts` concatenates them into `<table>.parquet` at the top
of the run directory, the files the README's "The run directory" promises. Readers use
`read_table`, which falls back to the parts when a run was cut short before the merge.
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
PARTS = "parts"
DISK_FULL_ENV = "COLLOBENCH_FAULT_DISK_FULL"
"""Fault injection (the reliability suite): `<label suffix>:<chunks>` makes every ChunkWriter
whose label ends with the suffix (a worker's label is `t<trial>-<phase>-<pipeline>`) run out of
disk space after writing that many chunks: the next chunk leaves a truncated temporary file
and raises ENOSPC, as a full disk does half-way through a write. Unset in normal use."""


def _disk_full_after(label: str) -> int | None:
    """Chunks this writer may write before the injected disk-full fault (None: no fault)."""
    setting = os.environ.get(DISK_FULL_ENV, "")
    suffix, _, chunks = setting.rpartition(":")
    if not setting or not label.endswith(suffix) or not chunks.isdigit():
        return None
    return int(chunks)


# Columns every row carries. Host-wide and device-wide samples have pipeline = NULL.
_KEY_FIELDS = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("trial", pa.int32(), nullable=False),
    pa.field("phase", pa.string(), nullable=False),
    pa.field("pipeline", pa.string()),
]

SCHEMAS: dict[str, pa.Schema] = {
    "queries": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("scheduled_ns", pa.int64(), nullable=False),
            pa.field("issued_ns", pa.int64()),  # for dropped queries: when the issue was refused
            pa.field("completed_ns", pa.int64()),  # NULL unless the query ended (ok or error)
            # ok | error | dropped | timeout | not_issued (due in the window, load stopped first)
            pa.field("status", pa.string(), nullable=False),
            pa.field("samples", pa.int32(), nullable=False),
            pa.field("warmup", pa.bool_(), nullable=False),
        ]
    ),
    "stage_events": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            # at a join: when the first branch arrived (join wait = joined_ns - enqueued_ns)
            pa.field("enqueued_ns", pa.int64(), nullable=False),
            pa.field("started_ns", pa.int64(), nullable=False),
            pa.field("finished_ns", pa.int64(), nullable=False),
            pa.field("status", pa.string(), nullable=False),  # ok | error
            pa.field("first_token_ns", pa.int64()),  # generation stages only
            pa.field("tokens", pa.int32()),
            pa.field("joined_ns", pa.int64()),  # join stages: when every branch had arrived
            # stages that know the right answers: samples graded, samples answered right
            pa.field("graded", pa.int32()),
            pa.field("correct", pa.int32()),
            pa.field("loss", pa.float64()),  # training stages: the step's loss
        ]
    ),
    "errors": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("stage", pa.string(), nullable=False),
            pa.field("first_query_id", pa.int64(), nullable=False),
            pa.field("count", pa.int64(), nullable=False),
            pa.field("error", pa.string(), nullable=False),  # one row per distinct error text
        ]
    ),
    "host_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            # host | process (a pipeline's worker) | harness (launcher, samplers)
            pa.field("scope", pa.string(), nullable=False),
            pa.field("pid", pa.int64()),
            pa.field("cpu_util", pa.float64()),  # percent of one core (process) / all cores (host)
            pa.field("rss_mib", pa.float64()),
            pa.field("energy_j", pa.float64()),  # cumulative since sampler start (host rows)
            pa.field("energy_source", pa.string()),  # rapl | model_estimate | NULL
        ]
    ),
    "gpu_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            pa.field("gpu", pa.int32(), nullable=False),
            pa.field("uuid", pa.string()),
            pa.field("power_w", pa.float64()),
            pa.field("energy_j", pa.float64()),  # cumulative since sampler start, resets repaired
            pa.field("energy_source", pa.string()),  # nvml_counter | nvml_power
            pa.field("sm_util", pa.float64()),
            pa.field("mem_util", pa.float64()),
            pa.field("mem_used_mib", pa.float64()),
            pa.field("sm_clock_mhz", pa.float64()),
            pa.field("temp_c", pa.float64()),
            pa.field("throttle_reasons", pa.int64()),
        ]
    ),
    # Operator profiling (`profile_every` of model stages): one row per profiler event of a
    # sampled query's model call, plus one `window` row per profiled query (the profiler's own
    # span), so the set of profiled (query_id, stage, visit) is known even without events.
    "operator_spans": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("query_id", pa.int64(), nullable=False),
            pa.field("stage", pa.string(), nullable=False),
            pa.field("visit", pa.int32(), nullable=False),
            pa.field("operator", pa.string(), nullable=False),  # aten::conv2d, a kernel name...
            pa.field("start_ns", pa.int64(), nullable=False),  # monotonic clock, like the rest
            pa.field("end_ns", pa.int64(), nullable=False),
            pa.field("device_type", pa.string(), nullable=False),  # cpu | cuda | window
            pa.field("device_index", pa.int32()),
            pa.field("thread_id", pa.int64()),  # torch's thread id (CPU), stream (CUDA)
            pa.field("self_cpu_ns", pa.int64()),  # CPU time minus child operators (CPU ops)
            pa.field("total_cpu_ns", pa.int64()),  # CPU time with child operators (CPU ops)
            pa.field("input_shapes", pa.string()),  # JSON, only with record_shapes
        ]
    ),
    "gpu_process_samples": pa.schema(
        [
            *_KEY_FIELDS,
            pa.field("ts_ns", pa.int64(), nullable=False),
            pa.field("gpu", pa.int32(), nullable=False),
            pa.field("pid", pa.int64(), nullable=False),
            pa.field("sm_util", pa.float64()),
            pa.field("mem_util", pa.float64()),
            pa.field("mem_used_mib", pa.float64()),
        ]
    ),
}


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_nullable(True) for field in schema])


class ChunkWriter:
    """Writes rows of one table, from one process and one label, as numbered chunk files."""

    def __init__(
        self,
        run_dir: Path,
        table: str,
        label: str,
        keys: dict[str, Any],
    ) -> None:
        self.schema = SCHEMAS[table]
        self.directory = Path(run_dir) / PARTS / table
        self.directory.mkdir(parents=True, exist_ok=True)
        self.label = label
        self.keys = keys
        self._sequence = itertools.count(1)
        self._chunks_before_disk_full = _disk_full_after(label)

    def warm_up(self) -> None:
        """Pay Parquet's one-time set-up (~150 ms: codecs, thread pools) now, before a
        measurement, instead of inside the first flush of a load window."""
        sink = pa.BufferOutputStream()
        sample = {field.name: [None] for field in self.schema}
        table = pa.Table.from_pydict(sample, schema=self.schema.remove_metadata().with_metadata({}))
        pq.write_table(table.cast(_nullable(self.schema)), sink, compression="zstd")

    def write_columns(self, columns: dict[str, list[Any]]) -> Path | None:
        """Write one chunk from column lists (key columns are added); returns its path."""
        types = {field.name: field.type for field in self.schema}
        arrays = {name: pa.array(values, type=types[name]) for name, values in columns.items()}
        return self.write_arrays(arrays)

    def write_arrays(self, columns: dict[str, pa.Array | pa.ChunkedArray]) -> Path | None:
        """Write one chunk from Arrow columns (key columns are added); returns its path."""
        length = len(next(iter(columns.values()))) if columns else 0
        if length == 0:
            return None
        arrays = []
        for field in self.schema:
            if field.name in columns:
                arrays.append(columns[field.name])
            else:  # a key column: one value repeated, built in C
                scalar = pa.scalar(self.keys.get(field.name), type=field.type)
                arrays.append(pa.repeat(scalar, length))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        path = self.directory / f"{self.label}-{next(self._sequence):06d}.parquet"
        temporary = path.with_suffix(".tmp")
        if self._chunks_before_disk_full is not None:
            self._chunks_before_disk_full = self._fill_disk(
                table, temporary, self._chunks_before_disk_full
            )
        pq.write_table(table, temporary, compression="zstd")
        os.replace(temporary, path)  # atomic: readers never see a half-written chunk
        return path

    @staticmethod
    def _fill_disk(table: pa.Table, temporary: Path, chunks_left: int) -> int:
        """The injected fault (DISK_FULL_ENV): with chunks left, one fewer; with none, write
        half of this chunk and raise ENOSPC."""
        if chunks_left > 0:
            return chunks_left - 1
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        temporary.write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temporary))


def part_files(run_dir: Path, table: str) -> list[Path]:
    return sorted((Path(run_dir) / PARTS / table).glob("*.parquet"))


def read_table(run_dir: Path, table: str) -> pa.Table:
    """The merged table if present, else whatever chunks a cut-short run left behind."""
    run_dir = Path(run_dir)
    merged = run_dir / f"{table}.parquet"
    tables = [pq.read_table(merged)] if merged.exists() else []
    tables += [pq.read_table(path) for path in part_files(run_dir, table)]
    if not tables:
        return SCHEMAS[table].empty_table()
    return pa.concat_tables(tables)


def merge_parts(run_dir: Path) -> dict[str, int]:
    """Concatenate each table's chunks into `<table>.parquet` (after any earlier merge);
    returns row counts. Tables nobody wrote get no file (gpu_samples without a GPU)."""
    run_dir = Path(run_dir)
    counts: dict[str, int] = {}
    for table_name in SCHEMAS:
        # A temporary chunk left by a failed write (a full disk) holds no whole rows.
        for leftover in (run_dir / PARTS / table_name).glob("*.tmp"):
            leftover.unlink()
        parts = part_files(run_dir, table_name)
        merged = run_dir / f"{table_name}.parquet"
        if not parts and not merged.exists():
            continue
        table = read_table(run_dir, table_name)
        temporary = merged.with_suffix(".tmp")
        pq.write_table(table, temporary, compression="zstd")
        os.replace(temporary, merged)
        for path in parts:
            path.unlink()
        counts[table_name] = table.num_rows
    parts_root = run_dir / PARTS
    if parts_root.exists():
        for directory in sorted(parts_root.glob("*"), reverse=True):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        if not any(parts_root.iterdir()):
            parts_root.rmdir()
    return counts

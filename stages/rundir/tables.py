"""Writing and reading run-directory tables: crash-safe chunk files, and their final merge.

While a run is live, every process writes its rows as small Parquet chunk files under
`parts/<table>/` (each written to a temporary name, then renamed, so a crash leaves only whole
files). When the run ends, `merge_parts` concatenates them into `<table>.parquet` at the top
of the run directory, the files docs/contracts.md#the-run-directory promises. Readers use
`read_table`, which falls back to the parts when a run was cut short before the merge.
The names and columns themselves are in stages.rundir.layout and stages.rundir.schemas (and
re-exported here for the writers that import them from this module).
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stages.rundir.layout import MANIFEST, PARTS, merged_file, part_files, table_files
from stages.rundir.schemas import SCHEMAS, TABLES

__all__ = [
    "DISK_FULL_ENV",
    "MANIFEST",
    "PARTS",
    "SCHEMAS",
    "TABLES",
    "ChunkWriter",
    "merge_parts",
    "part_files",
    "read_table",
]

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


def read_table(run_dir: Path, table: str) -> pa.Table:
    """The merged table if present, else whatever chunks a cut-short run left behind."""
    files, _ = table_files(run_dir, table)
    if not files:
        return SCHEMAS[table].empty_table()
    return pa.concat_tables([pq.read_table(path) for path in files])


def merge_parts(run_dir: Path) -> dict[str, int]:
    """Concatenate each table's chunks into `<table>.parquet` (after any earlier merge);
    returns row counts. Tables nobody wrote get no file (gpu_samples without a GPU)."""
    run_dir = Path(run_dir)
    counts: dict[str, int] = {}
    for table_name in TABLES:
        # A temporary chunk left by a failed write (a full disk) holds no whole rows.
        for leftover in (run_dir / PARTS / table_name).glob("*.tmp"):
            leftover.unlink()
        parts = part_files(run_dir, table_name)
        merged = merged_file(run_dir, table_name)
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

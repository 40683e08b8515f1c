"""Where things live in a run directory: the file names and the one function that finds a
table's Parquet files (the merged file plus any `parts/` chunks). The table list is
stages.rundir.schemas.TABLES (derived from the schemas).

Every reader of a run directory (the launcher, the warehouse loader, MLflow logging) goes
through `table_files`, so a run cut short before its merge reads the same everywhere.
pathlib only: the warehouse's loader imports this without paying for pyarrow.
"""

from __future__ import annotations

from pathlib import Path

MANIFEST = "manifest.json"
"""The run's manifest (stages.rundir.manifest.Manifest), at the top of the run directory."""
PARTS = "parts"
"""The folder of chunk files written while the run is live:
`parts/<table>/<label>-NNNNNN.parquet`."""


def merged_file(run_dir: Path, table: str) -> Path:
    """Where a table's merged file is (or will be): `<run_dir>/<table>.parquet`."""
    return Path(run_dir) / f"{table}.parquet"


def part_files(run_dir: Path, table: str) -> list[Path]:
    """A table's chunk files under `parts/<table>/`, in the order they were written."""
    return sorted((Path(run_dir) / PARTS / table).glob("*.parquet"))


def table_files(run_dir: Path, table: str) -> tuple[list[Path], bool]:
    """The Parquet files holding `table`: the merged file when present, then any chunk files
    left under parts/ (a run cut short before its merge has only those); and whether any
    chunk files were among them."""
    merged = merged_file(run_dir, table)
    parts = part_files(run_dir, table)
    return ([merged] if merged.is_file() else []) + parts, bool(parts)

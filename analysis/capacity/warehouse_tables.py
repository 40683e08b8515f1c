"""Capacity searches and regions in the warehouse: load a search directory into
`capacity_searches` and `capacity_probes`, a region directory into `capacity_region_rays`
(views `capacity` and `capacity_region`, analysis/sql/views/95_capacity.sql), and read the
views back by search or region.

Loading is idempotent: a search's (or region's) rows are deleted and inserted again in one
transaction. `load_capacity_dirs` is the writer's entry point: under the warehouse's writer
lock it loads searches and regions, each search's probe run directories and each region's
solo and ray searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pandas as pd

from analysis.capacity.file_reader import RegionFiles, SearchFiles, read_region, read_search
from analysis.capacity.table_rows import probe_row, ray_row, search_row
from analysis.reports.catalogue import check_columns
from analysis.reports.report_entries import ReportCatalogueError
from analysis.reports.views_not_per_run import BY_CAPACITY_VIEW
from analysis.warehouse import stored_summaries
from analysis.warehouse.db import Notify, to_stderr
from analysis.warehouse.keyed_rows import replace_keyed_rows, schema_has_views
from analysis.warehouse.loader import (
    LoadError,
    ensure_schema,
    migrated_writer,
    prepare_run,
    publish,
)
from analysis.warehouse.loader import _read_manifest as read_run_manifest
from analysis.warehouse.reader import connect_read_only
from analysis.warehouse.warehouse_runs import WarehouseRun
from stages.contracts.capacity_files import CAPACITY_FILE, PROBE_RUNS_DIR, REGION_FILE, SEARCH_FILE


def load_search(connection: duckdb.DuckDBPyConnection, search_dir: Path | str) -> str:
    """Load one search directory into capacity_searches and capacity_probes (the schema and
    views created or migrated first when they are not current); returns its search_id.
    Idempotent: the search's earlier rows are replaced in one transaction. The probes' run
    directories are not loaded here (load_capacity_dirs does)."""
    files = read_search(search_dir)
    rows = [probe_row(files.search_id, probe) for probe in files.probes]
    if not schema_has_views(connection, ("capacity", "capacity_region")):
        ensure_schema(connection)  # creates or migrates; refuses a newer warehouse
    replace_keyed_rows(
        connection,
        [("capacity_probes", "search_id"), ("capacity_searches", "search_id")],
        files.search_id,
        [("capacity/insert_search.sql", [search_row(files)]), ("capacity/insert_probe.sql", rows)],
    )
    return files.search_id


def load_region(connection: duckdb.DuckDBPyConnection, region_dir: Path | str) -> str:
    """Load one region directory's rays into capacity_region_rays (schema as load_search);
    returns its region_id. Idempotent: the region's earlier rows are replaced in one
    transaction. The rays' own searches are loaded by load_capacity_dirs."""
    files = read_region(region_dir)
    rows = [ray_row(files, ray) for ray in files.rays]
    if not schema_has_views(connection, ("capacity", "capacity_region")):
        ensure_schema(connection)  # creates or migrates; refuses a newer warehouse
    replace_keyed_rows(
        connection,
        [("capacity_region_rays", "region_id")],
        files.region_id,
        [("capacity/insert_region_ray.sql", rows)],
    )
    return files.region_id


def ray_search_dirs(files: RegionFiles) -> list[Path]:
    """The search directories of the region's rays (and solo searches) that exist: named by a
    ray's search_id inside the region directory or beside it."""
    ids = files.solo_search_ids()
    ids += [ray.search_id for ray in files.rays if ray.search_id]
    found = []
    for search_id in dict.fromkeys(ids):
        for folder in (files.region_dir / search_id, files.region_dir.parent / search_id):
            if (folder / SEARCH_FILE).exists() or (folder / CAPACITY_FILE).exists():
                found.append(folder)
                break
    return found


def probe_run_dirs(files: SearchFiles) -> list[Path]:
    """The probes' run directories that exist (each holds a manifest.json): the recorded
    run_dir, else the folder of that name under the search's probes/ (the search moved)."""
    found = []
    for probe in files.probes:
        run_dir = probe.run_dir
        if not run_dir:
            continue
        for candidate in (Path(run_dir), files.search_dir / PROBE_RUNS_DIR / Path(run_dir).name):
            if (candidate / "manifest.json").exists():
                found.append(candidate)
                break
    return found


def _searches(folder: Path) -> list[Path]:
    """A region's ray searches (and solo searches) found beside it, or the search itself."""
    if (folder / REGION_FILE).exists():
        return ray_search_dirs(read_region(folder))
    return [folder]


def _probe_runs(folders: Sequence[Path], notify: Notify) -> list[WarehouseRun]:
    """The probe runs of every search of `folders`, checked and ready to publish; a probe run
    that cannot be loaded is skipped with one line to `notify` (the search is what matters)."""
    runs: dict[str, WarehouseRun] = {}
    for folder in folders:
        for search in _searches(folder):
            for run_dir in probe_run_dirs(read_search(search)):
                try:
                    run = prepare_run(run_dir, read_run_manifest(run_dir))
                except LoadError as error:
                    notify(f"skipping probe run {run_dir}: {error}")
                    continue
                runs[run.run_id] = run
    return list(runs.values())


def _load_one(connection: duckdb.DuckDBPyConnection, folder: Path) -> list[str]:
    """Load a region (and its searches) or a search: their rows, not their probe runs."""
    if (folder / REGION_FILE).exists():
        loaded = [load_search(connection, search) for search in _searches(folder)]
        return [load_region(connection, folder), *loaded]
    return [load_search(connection, folder)]


def load_capacity_dirs(
    directories: Sequence[Path | str],
    db_path: Path | str,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
    probe_runs: bool = True,
) -> list[str]:
    """Load search and region directories into the warehouse at `db_path`, with each
    search's probe run directories (`probe_runs`) and each region's ray searches found beside
    it; returns the search and region ids loaded, in order. The probe runs are checked and
    summarised first, without the warehouse; then everything is published under its writer
    lock (analysis.warehouse.db.writer_lock)."""
    folders = [Path(folder) for folder in directories]
    db = Path(db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    runs = _probe_runs(folders, notify) if probe_runs else []
    rows = stored_summaries.compute(runs, db.parent) if runs else {}
    loaded: list[str] = []
    with migrated_writer(db, wait_s, notify) as connection:
        if runs:
            publish(connection, runs, rows)
        for folder in folders:
            loaded += _load_one(connection, folder)
    return loaded


def capacity_table(db_path: Path | str, view: str, key: str | None = None) -> pd.DataFrame:
    """The rows of a capacity view (`capacity`, `capacity_region`; analysis.reports.catalogue's
    CAPACITY_CATALOGUE) for one search or region (`key`: its search_id or region_id), or for
    all when None, in the catalogue's order, read-only. ReportCatalogueError (a LookupError) for a
    view not in that catalogue or a column it names that the view lacks."""
    found = BY_CAPACITY_VIEW.get(view)
    if found is None:
        raise ReportCatalogueError(f"{view!r} is not a capacity view")
    where = "" if key is None else f" WHERE {found.key} = ?"
    connection = connect_read_only(db_path)
    try:  # `view` and its columns come from the fixed catalogue
        frame = connection.execute(
            f"SELECT * FROM {view}{where} ORDER BY {', '.join(found.order_by)}",
            [] if key is None else [key],
        ).df()
    finally:
        connection.close()
    check_columns(view, frame.columns)
    return frame

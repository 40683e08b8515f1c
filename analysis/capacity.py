"""Capacity searches and regions in the warehouse and on disk: load a search directory
(`search.json`, `probes.jsonl`, `capacity.json`) or a region directory (`region.json`) into the
`capacity_*` tables, and write a search's or a region's report.md with its plot beside it.

The analysis layer may not import stages.capacity, so the JSON is read here with `json` and the
few field names are mirrored (tests/capacity/test_warehouse_contract.py builds the records
through the pydantic models and loads them, so a rename there breaks a test here). Loading is
idempotent: a search's (or region's) rows are deleted and inserted again in one transaction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from analysis import capacity_plots, migrations
from analysis.db import (
    Notify,
    connect_read_only,
    connect_writer,
    sql_text,
    to_stderr,
    writer_lock,
)
from analysis.loader import _read_manifest as read_run_manifest
from analysis.loader import ensure_schema, load_run
from analysis.report_catalogue import (
    BY_CAPACITY_VIEW,
    MARKDOWN_NUMBERS,
    CatalogueError,
    check_columns,
)

# The file names of stages/capacity/contract.py (mirrored: analysis cannot import it).
SEARCH_FILE = "search.json"
PROBES_FILE = "probes.jsonl"
CAPACITY_FILE = "capacity.json"
REGION_FILE = "region.json"
PROBES_DIR = "probes"
# The fields read from each file (stages/capacity/contract.py's names, mirrored; a test checks
# that each is still a field of its model).
SETTINGS_FIELDS = (
    "search_id", "spec_source", "spec_hash", "pipeline", "slo_ms", "percentile", "precision",
    "max_probes", "probe_s", "with_rates", "base_seed", "min_rate", "ray",
)  # fmt: skip
RESULT_FIELDS = (
    "search_id", "pipeline", "slo_ms", "percentile", "with_rates", "certified_qps",
    "estimate_qps", "estimate_ci95", "bracket", "probes", "stop_reason", "ceiling_qps",
    "monotonicity_violations", "flagged_probes", "estimate_method",
)  # fmt: skip
PROBE_FIELDS = (
    "index", "kind", "rate", "seed", "queries", "over_slo", "verdict", "p99_ms",
    "abort_reason", "run_dir", "flagged", "throughput_qps", "duration_s", "pipelines",
)  # fmt: skip
WITH_ALIAS = "with"  # `with_rates` is written as `with` by alias (model_dump by_alias=True)
REPORT_NAME = "report.md"
SEARCH_PLOT = "capacity_plot.png"
REGION_PLOT = "region_plot.png"


class CapacityFileError(ValueError):
    """A search or region directory cannot be read; the message is one line: `<path>: why`."""


# ---------------------------------------------------------------- reading the files


def _read_json(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CapacityFileError(f"{path}: no such file") from None
    except (OSError, ValueError) as error:
        raise CapacityFileError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(document, dict):
        raise CapacityFileError(f"{path}: not a JSON object")
    return document


def read_probe_lines(path: Path) -> list[dict[str, Any]]:
    """The probes of probes.jsonl, one JSON object a line; a torn last line (a crash while it
    was written) is ignored, a bad line before it is a CapacityFileError."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    probes = []
    for number, line in enumerate(lines, start=1):
        try:
            probes.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break
            raise CapacityFileError(f"{path}:{number}: not a JSON probe record") from None
    return probes


@dataclass(frozen=True)
class SearchFiles:
    """One search directory as JSON: search.json, capacity.json (None while the search runs)
    and its probes (capacity.json's when it is there, else probes.jsonl's)."""

    search_dir: Path
    settings: dict[str, Any]
    result: dict[str, Any] | None
    probes: list[dict[str, Any]]

    @property
    def search_id(self) -> str:
        return str(self.settings.get("search_id") or self.search_dir.name)

    def field(self, name: str, default: Any = None) -> Any:
        """A field of capacity.json, else of search.json, else `default`."""
        for document in (self.result or {}, self.settings):
            if document.get(name) is not None:
                return document[name]
        return default

    @property
    def with_rates(self) -> dict[str, float]:
        """Co-runners' fixed rates: `with` as written by alias, `with_rates` by field name."""
        rates = self.field(WITH_ALIAS, None)
        return dict(rates if rates is not None else self.field("with_rates", {}) or {})


def read_search(search_dir: Path | str) -> SearchFiles:
    """Read a search directory; CapacityFileError when it has neither search.json nor
    capacity.json, or a file is not JSON."""
    folder = Path(search_dir)
    has_settings = (folder / SEARCH_FILE).exists()
    has_result = (folder / CAPACITY_FILE).exists()
    if not has_settings and not has_result:
        raise CapacityFileError(f"{folder}: not a capacity search (no {SEARCH_FILE})")
    settings = _read_json(folder / SEARCH_FILE) if has_settings else {}
    result = _read_json(folder / CAPACITY_FILE) if has_result else None
    if result is not None and isinstance(result.get("probes"), list):
        probes = list(result["probes"])
    else:
        probes = read_probe_lines(folder / PROBES_FILE)
    files = SearchFiles(folder, settings, result, probes)
    for name in ("pipeline", "slo_ms"):
        if files.field(name) is None:
            raise CapacityFileError(f"{folder}: {SEARCH_FILE} has no {name}")
    return files


def _pair(value: Any) -> tuple[float | None, float | None]:
    """A [low, high] pair as two floats (None for a missing end or a missing pair)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None, None
    return _number(value[0]), _number(value[1])


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------- the warehouse


def search_row(files: SearchFiles) -> dict[str, Any]:
    """The capacity_searches row of a search (insert_search.sql's parameters)."""
    result = files.result or {}
    ci_low, ci_high = _pair(result.get("estimate_ci95"))
    bracket_lo, bracket_hi = _pair(result.get("bracket"))
    ray = files.settings.get("ray")
    return {
        "search_id": files.search_id,
        "pipeline": str(files.field("pipeline")),
        "slo_ms": float(files.field("slo_ms")),
        "percentile": float(files.field("percentile", 0.99)),
        "precision": _number(files.settings.get("precision")),
        "max_probes": files.settings.get("max_probes"),
        "probe_s": _number(files.settings.get("probe_s")),
        "with_rates": json.dumps(files.with_rates, sort_keys=True),
        "ray": None if ray is None else json.dumps(ray, sort_keys=True),
        "base_seed": files.settings.get("base_seed"),
        "min_rate": _number(files.settings.get("min_rate")),
        "spec_source": files.settings.get("spec_source"),
        "spec_hash": files.settings.get("spec_hash"),
        "certified_qps": _number(result.get("certified_qps")),
        "estimate_qps": _number(result.get("estimate_qps")),
        "estimate_ci95_low": ci_low,
        "estimate_ci95_high": ci_high,
        "bracket_lo": bracket_lo,
        "bracket_hi": bracket_hi,
        "stop_reason": result.get("stop_reason"),
        "ceiling_qps": _number(result.get("ceiling_qps")),
        "monotonicity_violations": result.get("monotonicity_violations"),
        "flagged_probes": result.get("flagged_probes"),
        "probes": len(files.probes),
        "estimate_method": result.get("estimate_method"),
        "complete": files.result is not None,
        "search_dir": str(files.search_dir.resolve()),
    }


def probe_row(search_id: str, probe: Mapping[str, Any]) -> dict[str, Any]:
    """The capacity_probes row of one probe record (insert_probe.sql's parameters)."""
    return {
        "search_id": search_id,
        "probe_index": int(probe["index"]),
        "kind": str(probe.get("kind") or "search"),
        "rate": float(probe["rate"]),
        "seed": int(probe["seed"]),
        "queries": int(probe["queries"]),
        "over_slo": int(probe["over_slo"]),
        "verdict": probe.get("verdict"),
        "p99_ms": _number(probe.get("p99_ms")),
        "abort_reason": probe.get("abort_reason"),
        "run_dir": probe.get("run_dir"),
        "flagged": bool(probe.get("flagged", False)),
        "throughput_qps": _number(probe.get("throughput_qps")),
        "duration_s": _number(probe.get("duration_s")),
        "pipelines": json.dumps(probe.get("pipelines") or {}, sort_keys=True),
    }


def _schema_ready(connection: duckdb.DuckDBPyConnection) -> bool:
    """The warehouse is at the current version and has the capacity views."""
    if migrations.stored_version(connection) != migrations.CURRENT_VERSION:
        return False
    found = connection.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name IN ('capacity', 'capacity_region')"
    ).fetchall()
    return bool(found) and found[0][0] == 2


def _ensure_schema(connection: duckdb.DuckDBPyConnection) -> list[int]:
    """The warehouse's schema and views, at the current version (the loader's ensure_schema:
    creates a new warehouse, migrates an older one, refuses a newer one); returns the
    versions migrated to."""
    return ensure_schema(connection)


def _replace(
    connection: duckdb.DuckDBPyConnection,
    deletes: Sequence[tuple[str, str]],
    key: str,
    inserts: Sequence[tuple[str, Sequence[dict[str, Any]]]],
) -> None:
    """In one transaction: delete `key`'s rows from each (table, key column) of `deletes`,
    then run each insert file once per row."""
    connection.execute("BEGIN TRANSACTION")
    try:
        for table, column in deletes:
            connection.execute(f"DELETE FROM {table} WHERE {column} = ?", [key])
        for name, rows in inserts:
            statement = sql_text(f"capacity/{name}")
            for row in rows:
                connection.execute(statement, row)
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise


def load_search(connection: duckdb.DuckDBPyConnection, search_dir: Path | str) -> str:
    """Load one search directory into capacity_searches and capacity_probes (the schema and
    views created or migrated first when they are not current); returns its search_id.
    Idempotent: the search's earlier rows are replaced in one transaction. The probes' run
    directories are not loaded here (load_capacity_dirs does)."""
    files = read_search(search_dir)
    rows = [probe_row(files.search_id, probe) for probe in files.probes]
    if not _schema_ready(connection):
        _ensure_schema(connection)
    _replace(
        connection,
        [("capacity_probes", "search_id"), ("capacity_searches", "search_id")],
        files.search_id,
        [("insert_search.sql", [search_row(files)]), ("insert_probe.sql", rows)],
    )
    return files.search_id


# ---------------------------------------------------------------- regions


def _first(document: Mapping[str, Any], names: Iterable[str]) -> Any:
    """The first of `names` that `document` has (not None): region.json is read by several
    spellings of a field, so a small rename on the writer's side does not lose a column."""
    for name in names:
        if document.get(name) is not None:
            return document[name]
    return None


# region.json's names (stages/capacity/region_model.py: RayResult.solo_capacity_qps, and
# RegionResult.solo), then spellings an older writer may have used.
_SOLO_NAMES = ("solo_capacity_qps", "solo", "solo_capacities", "solo_qps")
REGION_FIELDS = ("region_id", "pipelines", "solo", "rays")
RAY_FIELDS = (
    "index", "angle_deg", "direction", "solo_capacity_qps", "search_id", "certified_s",
    "estimate_s", "estimate_ci95_s", "bracket_s", "stop_reason", "probes",
    "monotonicity_violations", "flagged_probes",
)  # fmt: skip


@dataclass(frozen=True)
class RegionFiles:
    """One region directory's region.json."""

    region_dir: Path
    region: dict[str, Any]

    @property
    def region_id(self) -> str:
        return str(self.region.get("region_id") or self.region_dir.name)

    @property
    def rays(self) -> list[dict[str, Any]]:
        rays = self.region.get("rays")
        return [ray for ray in rays if isinstance(ray, dict)] if isinstance(rays, list) else []

    def pipelines(self) -> tuple[str, str]:
        """(A, B): region.json's `pipelines`, else the order of the first ray's direction."""
        named = self.region.get("pipelines")
        if isinstance(named, list | tuple) and len(named) == 2:
            return str(named[0]), str(named[1])
        for ray in self.rays:
            direction = ray.get("direction")
            if isinstance(direction, dict) and len(direction) == 2:
                first, second = direction
                return str(first), str(second)
        raise CapacityFileError(f"{self.region_dir / REGION_FILE}: names no pair of pipelines")

    def solo_capacity(self, ray: Mapping[str, Any], pipeline: str) -> float | None:
        """C_pipeline: the ray's `solo_capacity_qps`, else the region's `solo` entry (the
        capacity the rays scaled by: `scaling_qps`, else its certified capacity)."""
        for document in (ray, self.region):
            solo = _first(document, _SOLO_NAMES)
            if isinstance(solo, dict) and pipeline in solo:
                value = solo[pipeline]
                if isinstance(value, dict):  # a solo search's summary (SoloCapacity)
                    value = _first(value, ("scaling_qps", "certified_qps", "estimate_qps"))
                return _number(value)
        return None

    def solo_search_ids(self) -> list[str]:
        """The solo searches' ids (region.json's `solo` entries)."""
        solo = self.region.get("solo")
        if not isinstance(solo, dict):
            return []
        return [
            str(entry["search_id"])
            for entry in solo.values()
            if isinstance(entry, dict) and entry.get("search_id")
        ]


def read_region(region_dir: Path | str) -> RegionFiles:
    """Read a region directory's region.json; CapacityFileError when it is missing or bad."""
    folder = Path(region_dir)
    return RegionFiles(folder, _read_json(folder / REGION_FILE))


def _direction(ray: Mapping[str, Any], pipelines: tuple[str, str]) -> tuple[float, float]:
    """(cos, sin) of the ray's angle: its `direction`, else computed from angle_deg; rounded to
    12 decimals, so cos 90 degrees is 0 and not 6e-17."""
    direction = ray.get("direction")
    if isinstance(direction, dict) and all(name in direction for name in pipelines):
        pair = float(direction[pipelines[0]]), float(direction[pipelines[1]])
    else:
        angle = math.radians(float(ray["angle_deg"]))
        pair = math.cos(angle), math.sin(angle)
    return round(pair[0], 12), round(pair[1], 12)


def ray_row(files: RegionFiles, index: int, ray: Mapping[str, Any]) -> dict[str, Any]:
    """The capacity_region_rays row of one ray (insert_region_ray.sql's parameters);
    ray_index is the ray's `index` (1..rays), else its position in region.json."""
    first, second = files.pipelines()
    direction_a, direction_b = _direction(ray, (first, second))
    angle = ray.get("angle_deg")
    ci_low, ci_high = _pair(_first(ray, ("estimate_ci95_s", "estimate_ci95")))
    bracket_lo, bracket_hi = _pair(_first(ray, ("bracket_s", "bracket")))
    return {
        "region_id": files.region_id,
        "ray_index": int(ray.get("index", index)),
        "angle_deg": float(angle)
        if angle is not None
        else math.degrees(math.atan2(direction_b, direction_a)),
        "pipeline_a": first,
        "pipeline_b": second,
        "direction_a": direction_a,
        "direction_b": direction_b,
        "solo_capacity_a_qps": files.solo_capacity(ray, first),
        "solo_capacity_b_qps": files.solo_capacity(ray, second),
        "certified_s": _number(_first(ray, ("certified_s", "certified"))),
        "estimate_s": _number(_first(ray, ("estimate_s", "estimate"))),
        "estimate_ci95_low_s": ci_low,
        "estimate_ci95_high_s": ci_high,
        "bracket_lo_s": bracket_lo,
        "bracket_hi_s": bracket_hi,
        "stop_reason": ray.get("stop_reason"),
        "probes": ray.get("probes"),
        "flagged_probes": ray.get("flagged_probes"),
        "monotonicity_violations": ray.get("monotonicity_violations"),
        "search_id": ray.get("search_id"),
        "region_dir": str(files.region_dir.resolve()),
    }


def load_region(connection: duckdb.DuckDBPyConnection, region_dir: Path | str) -> str:
    """Load one region directory's rays into capacity_region_rays (schema as load_search);
    returns its region_id. Idempotent: the region's earlier rows are replaced in one
    transaction. The rays' own searches are loaded by load_capacity_dirs."""
    files = read_region(region_dir)
    rows = [ray_row(files, index, ray) for index, ray in enumerate(files.rays)]
    if not _schema_ready(connection):
        _ensure_schema(connection)
    _replace(
        connection,
        [("capacity_region_rays", "region_id")],
        files.region_id,
        [("insert_region_ray.sql", rows)],
    )
    return files.region_id


def ray_search_dirs(files: RegionFiles) -> list[Path]:
    """The search directories of the region's rays (and solo searches) that exist: named by a
    ray's search_id inside the region directory or beside it."""
    ids = files.solo_search_ids()
    ids += [str(ray["search_id"]) for ray in files.rays if ray.get("search_id")]
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
        run_dir = probe.get("run_dir")
        if not run_dir:
            continue
        for candidate in (Path(run_dir), files.search_dir / PROBES_DIR / Path(run_dir).name):
            if (candidate / "manifest.json").exists():
                found.append(candidate)
                break
    return found


def _load_one(connection: duckdb.DuckDBPyConnection, folder: Path, probe_runs: bool) -> list[str]:
    if (folder / REGION_FILE).exists():
        loaded = [
            _load_one(connection, search, probe_runs)[0]
            for search in ray_search_dirs(read_region(folder))
        ]
        return [load_region(connection, folder), *loaded]
    files = read_search(folder)
    if probe_runs:
        for run_dir in probe_run_dirs(files):
            load_run(connection, run_dir, read_run_manifest(run_dir))
    return [load_search(connection, folder)]


def load_capacity_dirs(
    directories: Sequence[Path | str],
    db_path: Path | str,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
    probe_runs: bool = True,
) -> list[str]:
    """Load search and region directories into the warehouse at `db_path` under its writer
    lock (analysis.db.writer_lock), with each search's probe run directories (`probe_runs`)
    and each region's ray searches found beside it; returns the search and region ids loaded,
    in order."""
    db = Path(db_path)
    with writer_lock(db, wait_s, notify):
        connection = connect_writer(db, wait_s, notify)
        try:
            applied = _ensure_schema(connection)
            if applied:
                notify(
                    f"{db}: upgraded the warehouse schema from version {applied[0] - 1} "
                    f"to {applied[-1]}"
                )
            loaded: list[str] = []
            for folder in directories:
                loaded += _load_one(connection, Path(folder), probe_runs)
            return loaded
        finally:
            connection.close()


def capacity_table(db_path: Path | str, view: str, key: str | None = None) -> pd.DataFrame:
    """The rows of a capacity view (`capacity`, `capacity_region`; analysis.report_catalogue's
    CAPACITY_CATALOGUE) for one search or region (`key`: its search_id or region_id), or for
    all when None, in the catalogue's order, read-only. CatalogueError (a LookupError) for a
    view not in that catalogue or a column it names that the view lacks."""
    found = BY_CAPACITY_VIEW.get(view)
    if found is None:
        raise CatalogueError(f"{view!r} is not a capacity view")
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


# ---------------------------------------------------------------- reports


def _cell(value: Any) -> str:
    return MARKDOWN_NUMBERS(float(value) if isinstance(value, int | float) else value)


def _with_interval(value: Any, low: Any, high: Any) -> str:
    if low is None or high is None:
        return _cell(value)
    return f"{_cell(value)} [{_cell(low)}, {_cell(high)}]"


def search_summary(files: SearchFiles) -> list[tuple[str, str]]:
    """(label, text) lines of a search's headline: the answer, how it stopped, the probes."""
    row = search_row(files)
    is_ray = files.settings.get("ray") is not None
    unit = "s (ray scale)" if is_ray else "q/s"
    co_runners = ", ".join(f"{name} at {rate:g} q/s" for name, rate in files.with_rates.items())
    bracket = (
        f"[{_cell(row['bracket_lo'])}, {_cell(row['bracket_hi'])}]"
        if row["bracket_lo"] is not None
        else "-"
    )
    return [
        ("pipeline", row["pipeline"]),
        ("SLO", f"p{100 * row['percentile']:g} <= {row['slo_ms']:g} ms"),
        ("with", co_runners or "nothing (alone)"),
        (f"certified ({unit})", _cell(row["certified_qps"])),
        (
            f"estimate [95% interval] ({unit})",
            _with_interval(
                row["estimate_qps"], row["estimate_ci95_low"], row["estimate_ci95_high"]
            ),
        ),
        ("bracket", bracket),
        ("stop reason", str(row["stop_reason"] or "unfinished")),
        ("probes", str(row["probes"])),
        ("flagged probes", _cell(row["flagged_probes"])),
        ("monotonicity violations", _cell(row["monotonicity_violations"])),
        ("ceiling (q/s)", _cell(row["ceiling_qps"])),
    ]


_PROBE_COLUMNS = (
    ("#", "index"),
    ("kind", "kind"),
    ("rate", "rate"),
    ("seed", "seed"),
    ("queries", "queries"),
    ("over SLO", "over_slo"),
    ("verdict", "verdict"),
    ("p99 ms", "p99_ms"),
    ("flagged", "flagged"),
    ("aborted", "abort_reason"),
    ("run", "run_dir"),
)


def probe_table(probes: Sequence[Mapping[str, Any]]) -> str:
    """The probes as a Markdown table, in the order they ran (run directories by name)."""
    lines = [
        "| " + " | ".join(header for header, _ in _PROBE_COLUMNS) + " |",
        "|" + "---|" * len(_PROBE_COLUMNS),
    ]
    for probe in sorted(probes, key=lambda item: int(item["index"])):
        cells = []
        for _, name in _PROBE_COLUMNS:
            value = probe.get(name)
            if name == "run_dir" and value:
                value = Path(str(value)).name
            if name == "flagged":
                value = "yes" if value else ""
            cells.append(_cell(value).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_search_report(search_dir: Path | str) -> Path:
    """Write report.md and capacity_plot.png (p99 against offered rate) into the search
    directory; returns report.md's path."""
    files = read_search(search_dir)
    plot = capacity_plots.plot_search(files, files.search_dir / SEARCH_PLOT)
    summary = "\n".join(f"- **{label}**: {text}" for label, text in search_summary(files))
    text = (
        f"# Capacity search `{files.search_id}`\n\n{summary}\n\n"
        f"![p99 against offered rate]({plot.name})\n\n"
        f"## Probes\n\n{probe_table(files.probes)}\n"
    )
    report = files.search_dir / REPORT_NAME
    report.write_text(text, encoding="utf-8")
    return report


_RAY_COLUMNS = (
    ("angle", "angle_deg"),
    ("certified s", "certified_s"),
    ("certified (x, y)", "certified_xy"),
    ("x + y", "certified_sum"),
    ("estimate s [95%]", "estimate"),
    ("estimate x + y", "estimate_sum"),
    ("stop reason", "stop_reason"),
    ("search", "search_id"),
)


def region_points(files: RegionFiles) -> list[dict[str, Any]]:
    """Each ray's row with its normalised points (what the capacity_region view computes)."""
    points = []
    for index, ray in enumerate(files.rays):
        row = ray_row(files, index, ray)
        weight = row["direction_a"] + row["direction_b"]
        for name in ("certified_s", "estimate_s", "estimate_ci95_low_s", "estimate_ci95_high_s"):
            value = row[name]
            stem = name.removesuffix("_s")
            row[f"{stem}_x"] = None if value is None else value * row["direction_a"]
            row[f"{stem}_y"] = None if value is None else value * row["direction_b"]
            row[f"{stem}_sum"] = None if value is None else value * weight
        points.append(row)
    return points


def _ray_cells(point: Mapping[str, Any]) -> list[str]:
    certified = (
        f"({_cell(point['certified_x'])}, {_cell(point['certified_y'])})"
        if point["certified_s"] is not None
        else "-"
    )
    estimate = _with_interval(
        point["estimate_s"], point["estimate_ci95_low_s"], point["estimate_ci95_high_s"]
    )
    values = {**point, "certified_xy": certified, "estimate": estimate}
    return [
        str(values[name]) if name in ("certified_xy", "estimate") else _cell(values[name])
        for _, name in _RAY_COLUMNS
    ]


def write_region_report(region_dir: Path | str) -> Path:
    """Write report.md and region_plot.png (the region on normalised axes) into the region
    directory; returns report.md's path."""
    files = read_region(region_dir)
    points = region_points(files)
    first, second = files.pipelines() if files.rays else ("A", "B")
    plot = capacity_plots.plot_region(points, (first, second), files.region_dir / REGION_PLOT)
    lines = [
        "| " + " | ".join(header for header, _ in _RAY_COLUMNS) + " |",
        "|" + "---|" * len(_RAY_COLUMNS),
        *("| " + " | ".join(_ray_cells(point)) + " |" for point in points),
    ]
    solo = [
        f"- **{name}** alone: {_cell(points[0][key]) if points else '-'} q/s"
        for name, key in ((first, "solo_capacity_a_qps"), (second, "solo_capacity_b_qps"))
    ]
    text = (
        f"# Capacity region `{files.region_id}`: {first} and {second}\n\n"
        + "\n".join(solo)
        + "\n\nx = rate of "
        f"{first} / its solo capacity, y = rate of {second} / its solo capacity; "
        "x + y = 1 is what pure time sharing of the device gives.\n\n"
        f"![capacity region]({plot.name})\n\n## Rays\n\n" + "\n".join(lines) + "\n"
    )
    report = files.region_dir / REPORT_NAME
    report.write_text(text, encoding="utf-8")
    return report

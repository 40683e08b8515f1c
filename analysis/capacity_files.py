"""The capacity search's files as the warehouse reads them: a search directory (`search.json`,
`probes.jsonl`, `capacity.json`) and a region directory (`region.json`), and the table rows
made of them (analysis.capacity_warehouse loads the rows, analysis.capacity_report writes the
reports).

The file names and the records are stages.contracts.capacity_files (the writer's contract). The
JSON is read here as plain objects, so a search still running (no capacity.json) or a region
written by an older writer still loads (tests/capacity/test_warehouse_contract.py checks that
every field read here is a field of a contract record, or one of the older spellings below)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    PROBES_FILE,
    REGION_FILE,
    SEARCH_FILE,
    WITH_ALIAS,
)
from stages.contracts.errors import InvalidInputError


class CapacityFileError(InvalidInputError, ValueError):
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
        # capacity II: absent (NULL) from a search written before its endings and budget
        "stop_detail": result.get("stop_detail"),
        "spent_s": _number(result.get("spent_s")),
        "budget_s": _number(files.settings.get("budget_s")),
        "min_queries": files.settings.get("min_queries"),
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
        # helper "core"'s ProbeRecord.design_effect (None: the verdict used the raw counts)
        "design_effect": _number(probe.get("design_effect")),
        "pipelines": json.dumps(probe.get("pipelines") or {}, sort_keys=True),
        # capacity II: absent from an older record (window NULL, cannot_pass false)
        "window_s": _number(probe.get("window_s")),
        "cannot_pass": bool(probe.get("cannot_pass", False)),
    }


# ---------------------------------------------------------------- regions


def _first(document: Mapping[str, Any], names: Iterable[str]) -> Any:
    """The first of `names` that `document` has (not None): region.json is read by several
    spellings of a field, so a small rename on the writer's side does not lose a column."""
    for name in names:
        if document.get(name) is not None:
            return document[name]
    return None


OLDER_SPELLINGS = ("solo_capacities", "solo_qps", "certified", "estimate")
"""Names an older region writer used for fields the contract now spells otherwise."""
# region.json's names (RayResult.solo_capacity_qps, RegionResult.solo), then older spellings.
_SOLO_NAMES = ("solo_capacity_qps", "solo", "solo_capacities", "solo_qps")


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

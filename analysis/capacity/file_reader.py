"""The capacity files as the analysis layer reads them, through the writer's records
(stages.contracts.capacity_files): a search directory (`search.json` as `SearchSettings`,
`capacity.json` as `CapacityResult`, `probes.jsonl` as `ProbeRecord`s) and a region directory
(`region.json` as `RegionResult`). A search still running (no capacity.json) reads from its
probes.jsonl, a torn last line (a crash while it was written) left out; a search written before
a record gained a field reads with that field's default. Anything else unreadable is a
`CapacityFileError`, one line: `<path>: why`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    PROBES_FILE,
    REGION_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeRecord,
    RayResult,
    RegionResult,
    SearchSettings,
)
from stages.contracts.errors import InvalidInputError

RecordT = TypeVar("RecordT", bound=BaseModel)


class CapacityFileError(InvalidInputError, ValueError):
    """A search or region directory cannot be read; the message is one line: `<path>: why`."""


def _read_record(path: Path, record: type[RecordT]) -> RecordT:
    """The JSON object at `path` as `record`; CapacityFileError when it is missing, not JSON or
    not such a record."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CapacityFileError(f"{path}: no such file") from None
    except (OSError, ValueError) as error:
        raise CapacityFileError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(document, dict):
        raise CapacityFileError(f"{path}: not a JSON object")
    try:
        return record.model_validate(document)
    except ValidationError as error:
        raise CapacityFileError(f"{path}: not a {record.__name__} ({_first(error)})") from None


def _first(error: ValidationError) -> str:
    """The first problem of a validation error, in one line."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    return f"{where}: {problem['msg']}" if where else str(problem["msg"])


def read_probe_lines(path: Path) -> list[ProbeRecord]:
    """The probes of probes.jsonl, one record a line; a torn last line (a crash while it was
    written) is ignored, a bad line before it is a CapacityFileError."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    probes = []
    for number, line in enumerate(lines, start=1):
        try:
            probes.append(ProbeRecord.model_validate_json(line))
        except ValueError:
            if number == len(lines):
                break
            raise CapacityFileError(f"{path}:{number}: not a JSON probe record") from None
    return probes


@dataclass(frozen=True)
class SearchFiles:
    """One search directory: search.json (None when only capacity.json is there),
    capacity.json (None while the search runs) and its probes (capacity.json's when it is
    there, else probes.jsonl's). At least one of settings and result is there."""

    search_dir: Path
    settings: SearchSettings | None
    result: CapacityResult | None
    probes: list[ProbeRecord]

    @property
    def search_id(self) -> str:
        return self.settings.search_id if self.settings is not None else self.search_dir.name

    @property
    def answered(self) -> CapacityResult | SearchSettings:
        """capacity.json's record, else search.json's: where the search's pipeline, SLO,
        percentile and co-runners are read."""
        if self.result is not None:
            return self.result
        assert self.settings is not None  # read_search reads no directory without either
        return self.settings

    @property
    def pipeline(self) -> str:
        return self.answered.pipeline

    @property
    def slo_ms(self) -> float:
        return self.answered.slo_ms

    @property
    def percentile(self) -> float:
        return self.answered.percentile

    @property
    def with_rates(self) -> dict[str, float]:
        """Co-runners' fixed rates (queries/s)."""
        return dict(self.answered.with_rates)

    @property
    def is_ray(self) -> bool:
        """A region ray's search (its rate is the ray's scale s, not queries/s)."""
        return self.settings is not None and self.settings.ray is not None


def read_search(search_dir: Path | str) -> SearchFiles:
    """Read a search directory; CapacityFileError when it has neither search.json nor
    capacity.json, or a file is not its record."""
    folder = Path(search_dir)
    has_settings = (folder / SEARCH_FILE).exists()
    has_result = (folder / CAPACITY_FILE).exists()
    if not has_settings and not has_result:
        raise CapacityFileError(f"{folder}: not a capacity search (no {SEARCH_FILE})")
    settings = _read_record(folder / SEARCH_FILE, SearchSettings) if has_settings else None
    result = _read_record(folder / CAPACITY_FILE, CapacityResult) if has_result else None
    probes = list(result.probes) if result is not None else read_probe_lines(folder / PROBES_FILE)
    return SearchFiles(folder, settings, result, probes)


@dataclass(frozen=True)
class RegionFiles:
    """One region directory's region.json."""

    region_dir: Path
    region: RegionResult

    @property
    def region_id(self) -> str:
        return self.region.region_id

    @property
    def rays(self) -> list[RayResult]:
        return list(self.region.rays)

    def pipelines(self) -> tuple[str, str]:
        """(A, B): A is x, B is y."""
        return self.region.pipelines

    def solo_capacity(self, ray: RayResult, pipeline: str) -> float | None:
        """C_pipeline: the capacity the ray scaled by, else the region's solo entry's
        (`scaling_qps`, else its certified capacity, else its estimate)."""
        if pipeline in ray.solo_capacity_qps:
            return ray.solo_capacity_qps[pipeline]
        solo = self.region.solo.get(pipeline)
        if solo is None:
            return None
        for value in (solo.scaling_qps, solo.certified_qps, solo.estimate_qps):
            if value is not None:
                return value
        return None

    def solo_search_ids(self) -> list[str]:
        """The solo searches' ids (region.json's `solo` entries)."""
        return [entry.search_id for entry in self.region.solo.values() if entry.search_id]


def read_region(region_dir: Path | str) -> RegionFiles:
    """Read a region directory's region.json; CapacityFileError when it is missing or bad."""
    folder = Path(region_dir)
    return RegionFiles(folder, _read_record(folder / REGION_FILE, RegionResult))

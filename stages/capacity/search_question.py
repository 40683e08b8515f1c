"""What one capacity search is asked, checked against the spec: a new search's settings from
the flags given (`new_settings`), a stopped search's recorded settings (`resumed_settings`),
and a region's settings template (`region_template`). Bad input is a `SearchInputError`, one
line naming the flag (the CLI exits 2)."""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from stages.capacity.probe_spec import check_searchable
from stages.capacity.store import SearchStore
from stages.contracts.capacity_files import SearchSettings
from stages.contracts.errors import InvalidInputError
from stages.spec.models import PipelineSpec
from stages.validation.loading import LoadedSpec

SEARCH_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A search's (or region's) folder name."""
WITH_PATTERN = re.compile(r"(?P<name>[^=\s]+)=(?P<rate>[^=\s]+)")
"""A --with value: OTHER=RATE."""
OPEN_LOOP_TYPES = ("server", "constant")
"""Load generators whose `rate` a search scales (capacity is an open-loop question)."""
_FLAGS = {
    "probe_s": "--probe-s",
    "max_probes": "--max-probes",
    "with": "--with",
    "budget_s": "--budget-min",
    "min_queries": "--probe-queries",
}
"""The flag that sets a SearchSettings field, where it is not `--<field>`."""
ModelT = TypeVar("ModelT", bound=BaseModel)


class SearchInputError(InvalidInputError, ValueError):
    """A search asked for with bad input: one line naming the flag (the CLI exits 2)."""


@dataclass(frozen=True)
class SearchQuestion:
    """The flags of a new search, as given."""

    pipeline: str | None
    slo_ms: float | None
    percentile: float
    precision: float
    max_probes: int
    probe_s: float | None
    budget_s: float | None = None
    probe_queries: int | None = None


def new_settings(
    loaded: LoadedSpec,
    asked: SearchQuestion,
    with_rates: list[str],
    search_id: str | None,
    parent: Path,
) -> SearchSettings:
    """The SearchSettings of a new search in `parent`; SearchInputError on bad input (and
    ProbeSpecError for a spec the probes cannot run)."""
    target = _target(loaded, asked.pipeline)
    slo_ms = asked.slo_ms if asked.slo_ms is not None else target.loadgen.slo_ms
    if slo_ms is None:
        raise SearchInputError(f"{asked.pipeline}: no slo_ms in the spec's pipeline: give --slo-ms")
    rates = parse_with(with_rates, loaded, target.name)
    probe_s = asked.probe_s if asked.probe_s is not None else target.loadgen.duration_s
    name = search_id or _default_search_id(loaded, target.name)
    if not SEARCH_ID_PATTERN.fullmatch(name):
        raise SearchInputError(f"--search-id: {name!r} is not a folder name")
    if (parent / name).exists():
        raise SearchInputError(
            f"--search-id: {parent / name} exists: continue it with --resume {name}"
        )
    fields = {
        "search_id": name,
        "spec_source": loaded.source,
        "spec_hash": loaded.spec_hash,
        "pipeline": target.name,
        "slo_ms": slo_ms,
        "percentile": asked.percentile,
        "precision": asked.precision,
        "max_probes": asked.max_probes,
        "probe_s": probe_s,
        "with": rates,
        "base_seed": loaded.spec.seed,
        "budget_s": asked.budget_s,
        "min_queries": asked.probe_queries,
    }
    search = validated(SearchSettings, fields)
    check_searchable(loaded, search)  # a ProbeSpecError: exit 2 (stages.cli.errors)
    return search


def _target(loaded: LoadedSpec, pipeline: str | None) -> PipelineSpec:
    """The searched pipeline's spec; SearchInputError when unnamed, unknown or not open loop."""
    known = [p.name for p in loaded.spec.pipelines]
    if pipeline is None:
        raise SearchInputError(
            f"--pipeline: name the pipeline to search (known: {', '.join(known)})"
        )
    target = next((p for p in loaded.spec.pipelines if p.name == pipeline), None)
    if target is None:
        raise SearchInputError(
            f"--pipeline {pipeline}: unknown pipeline (known: {', '.join(known)})"
        )
    if target.loadgen.type not in OPEN_LOOP_TYPES:
        raise SearchInputError(
            f"{pipeline} has a {target.loadgen.type} loadgen: capacity is an open-loop "
            f"question: give {pipeline} a server or constant loadgen"
        )
    return target


def parse_with(values: list[str], loaded: LoadedSpec, target: str) -> dict[str, float]:
    """--with OTHER=RATE values as {name: rate}; SearchInputError on an unknown name or a bad
    rate."""
    known = [p.name for p in loaded.spec.pipelines if p.name != target]
    rates: dict[str, float] = {}
    for value in values:
        match = WITH_PATTERN.fullmatch(value.strip())
        if match is None:
            raise SearchInputError(f"--with {value!r}: expected OTHER=RATE (e.g. busy=20)")
        name, text = match["name"], match["rate"]
        if name not in known:
            raise SearchInputError(
                f"--with {value}: unknown co-runner {name!r} (known: {', '.join(known) or '-'})"
            )
        try:
            rate = float(text)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate > 0):
            raise SearchInputError(f"--with {value}: RATE must be a positive number of queries/s")
        rates[name] = rate
    return rates


def resumed_settings(loaded: LoadedSpec, parent: Path, search_id: str) -> SearchSettings:
    """The recorded settings of the search to continue; SearchInputError when there is none
    or it was started on another spec."""
    store = SearchStore(parent / search_id)
    if not SEARCH_ID_PATTERN.fullmatch(search_id) or not store.exists():
        raise SearchInputError(f"--resume {search_id}: no such search in {parent}")
    try:
        recorded = store.read_settings()
    except ValueError as error:
        raise SearchInputError(
            f"--resume {search_id}: unreadable {store.settings_path}: {error}"
        ) from None
    if recorded.spec_hash != loaded.spec_hash:
        raise SearchInputError(
            f"--resume {search_id}: the spec differs from the one the search started with "
            f"(hash {loaded.spec_hash[:12]} vs {str(recorded.spec_hash)[:12]})"
        )
    return recorded


def region_template(loaded: LoadedSpec, region: str, asked: SearchQuestion) -> SearchSettings:
    """The knobs every search of region `region` (A,B) shares (percentile, precision, probes,
    window, seed, budget); each search gets its identity from stages.capacity.region. The
    window defaults to the longest duration_s of the two pipelines."""
    names = [name.strip() for name in region.split(",")]
    durations = [p.loadgen.duration_s for p in loaded.spec.pipelines if p.name in names]
    probe_s = asked.probe_s if asked.probe_s is not None else max(durations, default=10.0)
    fields = {
        "search_id": "template",
        "pipeline": "template",
        "slo_ms": 1.0,
        "percentile": asked.percentile,
        "precision": asked.precision,
        "max_probes": asked.max_probes,
        "probe_s": probe_s,
        "base_seed": loaded.spec.seed,
        "budget_s": asked.budget_s,
        "min_queries": asked.probe_queries,
    }
    return validated(SearchSettings, fields)


def validated(model: type[ModelT], fields: dict[str, Any]) -> ModelT:
    """The model from `fields`, or SearchInputError naming the first bad flag."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        name = str(problem["loc"][0]) if problem["loc"] else ""
        flag = _FLAGS.get(name, f"--{name.replace('_', '-')}")
        raise SearchInputError(f"{flag}: {problem['msg']} (got {problem.get('input')!r})") from None


def _default_search_id(loaded: LoadedSpec, pipeline: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{loaded.spec.name}-{pipeline}"

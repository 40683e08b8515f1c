"""`collobench capacity`: the highest offered load a pipeline sustains within its latency SLO,
alone or next to co-runners at fixed rates, by a search over real probes (stages.capacity).
Bad input is one line and exit 2; an infeasible SLO is an answer (exit 0); Ctrl-C keeps the
probes so far and exits 130 naming `--resume`."""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.capacity_output import print_result, publish_search
from stages.cli.commands.capacity_options import (
    BudgetOption,
    MaxProbesOption,
    MlflowOption,
    OutOption,
    PercentileOption,
    PipelineOption,
    PrecisionOption,
    ProbeQueriesOption,
    ProbeSecondsOption,
    ResumeOption,
    SearchIdOption,
    SloOption,
    WithOption,
)
from stages.cli.commands.capacity_region import (
    RayOption,
    RaysOption,
    RegionOption,
    SoloOption,
    refuse_region_conflicts,
)
from stages.cli.console import err, fail_input
from stages.cli.options import DbOption
from stages.contracts.errors import ExitCode
from stages.validation.loading import LoadedSpec, load_spec

SEARCH_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
WITH_PATTERN = re.compile(r"(?P<name>[^=\s]+)=(?P<rate>[^=\s]+)")


def capacity(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file.", show_default=False)],
    pipeline: PipelineOption = None,
    slo_ms: SloOption = None,
    percentile: PercentileOption = 0.99,
    precision: PrecisionOption = 0.05,
    max_probes: MaxProbesOption = 20,
    probe_s: ProbeSecondsOption = None,
    budget_min: BudgetOption = 15.0,
    probe_queries: ProbeQueriesOption = None,
    with_: WithOption = None,
    out_dir: OutOption = None,
    resume: ResumeOption = None,
    search_id: SearchIdOption = None,
    db: DbOption = None,
    mlflow: MlflowOption = True,
    region: RegionOption = None,
    rays: RaysOption = 5,
    ray: RayOption = None,
    solo: SoloOption = None,
) -> None:
    """Find the highest offered rate PIPELINE sustains within its latency SLO (certified by
    LoadGen's rule, and estimated with a 95% interval), alone or next to --with co-runners;
    with --region A,B, the capacity region of two pipelines."""
    loaded = load_spec(spec, [])
    parent = out_dir or settings.capacity_dir()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mlflow_uri = settings.mlflow_tracking_uri() if mlflow else None
    asked = SearchQuestion(
        pipeline, slo_ms, percentile, precision, max_probes, probe_s, budget_min * 60, probe_queries
    )
    if region is not None:
        refuse_region_conflicts(pipeline, slo_ms, with_)
        where = RegionWhere(spec, parent, resume or search_id, db or settings.duckdb_path())
        capacity_region(loaded, region, (rays, ray, solo), asked, where, mlflow_uri)
        return
    if resume is not None:
        search = resumed_settings(loaded, parent, resume)
    else:
        search = new_settings(loaded, asked, with_ or [], search_id, parent)
    result = _search(loaded, search, parent, mlflow_uri)
    search_dir = parent / search.search_id
    report = publish_search(search_dir, db or settings.duckdb_path())
    print_result(result, search_dir, report)


class SearchQuestion:
    """The flags of a new search, as given."""

    def __init__(
        self,
        pipeline: str | None,
        slo_ms: float | None,
        percentile: float,
        precision: float,
        max_probes: int,
        probe_s: float | None,
        budget_s: float | None = None,
        probe_queries: int | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.slo_ms = slo_ms
        self.percentile = percentile
        self.precision = precision
        self.max_probes = max_probes
        self.probe_s = probe_s
        self.budget_s = budget_s
        self.probe_queries = probe_queries


def new_settings(
    loaded: LoadedSpec,
    asked: SearchQuestion,
    with_rates: list[str],
    search_id: str | None,
    parent: Path,
) -> Any:
    """The SearchSettings of a new search; exit 2 with one line on bad input."""
    from stages.capacity.probe_spec import check_searchable
    from stages.contracts.capacity_files import SearchSettings

    target = _target(loaded, asked.pipeline)
    slo_ms = asked.slo_ms if asked.slo_ms is not None else target.loadgen.slo_ms
    if slo_ms is None:
        raise fail_input([f"{asked.pipeline}: no slo_ms in the spec's pipeline: give --slo-ms"])
    rates = parse_with(with_rates, loaded, target.name)
    probe_s = asked.probe_s if asked.probe_s is not None else target.loadgen.duration_s
    name = search_id or _default_search_id(loaded, target.name)
    if not SEARCH_ID_PATTERN.fullmatch(name):
        raise fail_input([f"--search-id: {name!r} is not a folder name"])
    if (parent / name).exists():
        raise fail_input([f"--search-id: {parent / name} exists: continue it with --resume {name}"])
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
    search = _validated(SearchSettings, fields)
    check_searchable(loaded, search)  # a ProbeSpecError: exit 2 (stages.cli.errors)
    return search


def _target(loaded: LoadedSpec, pipeline: str | None) -> Any:
    """The searched pipeline's spec; exit 2 when unnamed, unknown or not open loop."""
    known = [p.name for p in loaded.spec.pipelines]
    if pipeline is None:
        raise fail_input([f"--pipeline: name the pipeline to search (known: {', '.join(known)})"])
    target = next((p for p in loaded.spec.pipelines if p.name == pipeline), None)
    if target is None:
        raise fail_input([f"--pipeline {pipeline}: unknown pipeline (known: {', '.join(known)})"])
    if target.loadgen.type not in ("server", "constant"):
        raise fail_input(
            [
                f"{pipeline} has a {target.loadgen.type} loadgen: capacity is an open-loop "
                f"question: give {pipeline} a server or constant loadgen"
            ]
        )
    return target


def parse_with(values: list[str], loaded: LoadedSpec, target: str) -> dict[str, float]:
    """--with OTHER=RATE values as {name: rate}; exit 2 on an unknown name or a bad rate."""
    known = [p.name for p in loaded.spec.pipelines if p.name != target]
    rates: dict[str, float] = {}
    for value in values:
        match = WITH_PATTERN.fullmatch(value.strip())
        if match is None:
            raise fail_input([f"--with {value!r}: expected OTHER=RATE (e.g. busy=20)"])
        name, text = match["name"], match["rate"]
        if name not in known:
            raise fail_input(
                [f"--with {value}: unknown co-runner {name!r} (known: {', '.join(known) or '-'})"]
            )
        try:
            rate = float(text)
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate > 0):
            raise fail_input([f"--with {value}: RATE must be a positive number of queries/s"])
        rates[name] = rate
    return rates


def resumed_settings(loaded: LoadedSpec, parent: Path, search_id: str) -> Any:
    """The recorded settings of the search to continue; exit 2 when there is none or it was
    started on another spec."""
    from stages.capacity.store import SearchStore

    store = SearchStore(parent / search_id)
    if not SEARCH_ID_PATTERN.fullmatch(search_id) or not store.exists():
        raise fail_input([f"--resume {search_id}: no such search in {parent}"])
    try:
        recorded = store.read_settings()
    except ValueError as error:
        raise fail_input(
            [f"--resume {search_id}: unreadable {store.settings_path}: {error}"]
        ) from None
    if recorded.spec_hash != loaded.spec_hash:
        raise fail_input(
            [
                f"--resume {search_id}: the spec differs from the one the search started with "
                f"(hash {loaded.spec_hash[:12]} vs {str(recorded.spec_hash)[:12]})"
            ]
        )
    return recorded


def _validated(model: Any, fields: dict[str, Any]) -> Any:
    """The model from `fields`, or exit 2 naming the first bad flag."""
    from pydantic import ValidationError

    flags = {
        "probe_s": "--probe-s",
        "max_probes": "--max-probes",
        "with": "--with",
        "budget_s": "--budget-min",
        "min_queries": "--probe-queries",
    }
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        problem = error.errors()[0]
        name = str(problem["loc"][0]) if problem["loc"] else ""
        flag = flags.get(name, f"--{name.replace('_', '-')}")
        raise fail_input([f"{flag}: {problem['msg']} (got {problem.get('input')!r})"]) from None


@dataclass(frozen=True)
class RegionWhere:
    """Where a region's files go: the spec given, --out, the region's id (--resume or
    --search-id; None: a new one), the warehouse."""

    spec: Path
    parent: Path
    region_id: str | None
    db_path: Path


def capacity_region(
    loaded: LoadedSpec,
    region: str,
    ray_flags: tuple[int, int | None, str | None],
    asked: SearchQuestion,
    where: RegionWhere,
    mlflow_uri: str | None,
) -> None:
    """`--region A,B`: the region's searches (solo, then one per ray) with real probes, each
    resuming its own folder; the region's plot; exit 2 / 130 as the region command says."""
    from stages.capacity.search_runner import SearchRunOptions, run_capacity_search
    from stages.cli.capacity_output import log_search, verdict_latencies
    from stages.cli.commands.capacity_region import run_region_command
    from stages.cli.events import say
    from stages.contracts.capacity_files import SearchSettings
    from stages.contracts.slo_verdict import LoadgenSloRule

    rays, ray, solo = ray_flags
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
    options = SearchRunOptions(
        out_dir=where.parent,
        cache_dir=settings.cache_dir(),
        rule=LoadgenSloRule(),
        verdict_latencies=verdict_latencies,
        mlflow_uri=mlflow_uri,
        log_search=log_search,
        progress=lambda line: say("probe", line),
    )
    run_region_command(
        where.spec,
        loaded,
        region,
        rays,
        options=options,
        settings_template=_validated(SearchSettings, fields),
        run_search=run_capacity_search,
        region_id=where.region_id,
        ray=ray,
        solo=solo,
        report=lambda region_dir: _region_report(region_dir, where.db_path),
    )


def _region_report(region_dir: Path, db_path: Path) -> Path:
    """The region in the warehouse (a warning when it cannot be loaded) and its plot."""
    from analysis.capacity_warehouse import load_region, write_region_report
    from analysis.db import connect_writer, writer_lock

    try:
        with writer_lock(db_path):
            connection = connect_writer(db_path)
            try:
                load_region(connection, region_dir)
            finally:
                connection.close()
    except Exception as error:
        err.print(f"warning: could not load the region into {db_path}: {error}", markup=False)
    try:
        return Path(write_region_report(region_dir))
    except Exception as error:  # region.json is written: the plot is only a convenience
        err.print(f"warning: could not plot the region: {error}", markup=False)
        return region_dir


def _default_search_id(loaded: LoadedSpec, pipeline: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{loaded.spec.name}-{pipeline}"


def _search(loaded: LoadedSpec, search: Any, parent: Path, mlflow_uri: str | None) -> Any:
    """Run (or resume) the search, one progress line per probe; exit 130 on Ctrl-C."""
    from stages.capacity.search_runner import SearchRunOptions, run_capacity_search
    from stages.cli.capacity_output import log_search, verdict_latencies
    from stages.cli.events import say
    from stages.collocation.launcher import LauncherInterruptedWithResult
    from stages.contracts.slo_verdict import LoadgenSloRule
    from stages.services.lifecycle import ServiceError

    options = SearchRunOptions(
        out_dir=parent,
        cache_dir=settings.cache_dir(),
        rule=LoadgenSloRule(),
        verdict_latencies=verdict_latencies,
        mlflow_uri=mlflow_uri,
        log_search=log_search,
        progress=lambda line: say("probe", line),
    )
    folder = parent / search.search_id
    say("search_start", f"capacity search {search.search_id}: {folder}", folder=str(folder))
    try:
        return run_capacity_search(loaded, search, options)
    except ServiceError as error:  # a service up for the search failed to start, or died
        err.print(f"capacity search stopped: {error}", markup=False)
        raise typer.Exit(ExitCode.FAILED_RUN) from None
    except (KeyboardInterrupt, LauncherInterruptedWithResult):
        err.print(
            f"interrupted; the probes so far are kept: continue with "
            f"collobench capacity {loaded.source} --out {parent} --resume {search.search_id}",
            markup=False,
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None

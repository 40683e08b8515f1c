"""`collobench capacity`: the highest offered load a pipeline sustains within its latency SLO,
alone or next to co-runners at fixed rates, by a search over real probes (stages.capacity).
Bad input is one line and exit 2; an infeasible SLO is an answer (exit 0); Ctrl-C keeps the
probes so far and exits 130 naming `--resume`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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

if TYPE_CHECKING:
    from stages.capacity.search_question import SearchQuestion
    from stages.capacity.search_runner import SearchRunOptions
    from stages.contracts.capacity_files import CapacityResult, SearchSettings


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
    from stages.capacity.search_question import (
        SearchInputError,
        SearchQuestion,
        new_settings,
        resumed_settings,
    )

    loaded = load_spec(spec, [])
    parent = out_dir or settings.capacity_dir()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mlflow_uri = settings.mlflow_tracking_uri() if mlflow else None
    asked = SearchQuestion(
        pipeline, slo_ms, percentile, precision, max_probes, probe_s, budget_min * 60, probe_queries
    )
    try:
        if region is not None:
            refuse_region_conflicts(pipeline, slo_ms, with_)
            where = RegionWhere(spec, parent, resume or search_id, db or settings.duckdb_path())
            capacity_region(loaded, region, (rays, ray, solo), asked, where, mlflow_uri)
            return
        if resume is not None:
            search = resumed_settings(loaded, parent, resume)
        else:
            search = new_settings(loaded, asked, with_ or [], search_id, parent)
    except SearchInputError as error:
        raise fail_input(error.lines()) from None
    result = _search(loaded, search, parent, mlflow_uri)
    search_dir = parent / search.search_id
    report = publish_search(search_dir, db or settings.duckdb_path())
    print_result(result, search_dir, report)


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
    from stages.capacity.search_question import region_template
    from stages.capacity.search_runner import run_capacity_search
    from stages.cli.commands.capacity_region import run_region_command

    rays, ray, solo = ray_flags
    run_region_command(
        where.spec,
        loaded,
        region,
        rays,
        options=_run_options(where.parent, mlflow_uri),
        settings_template=region_template(loaded, region, asked),
        run_search=run_capacity_search,
        region_id=where.region_id,
        ray=ray,
        solo=solo,
        report=lambda region_dir: _region_report(region_dir, where.db_path),
    )


def _region_report(region_dir: Path, db_path: Path) -> Path:
    """The region in the warehouse (a warning when it cannot be loaded) and its plot."""
    from analysis.capacity.report_markdown import write_region_report
    from analysis.capacity.warehouse_tables import load_region
    from analysis.warehouse.db import connect_writer, writer_lock

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


def _run_options(parent: Path, mlflow_uri: str | None) -> SearchRunOptions:
    """What a search run needs from the command line: where, the verdict latencies (the
    analysis layer's), MLflow, and one progress line per probe."""
    from stages.capacity.search_runner import SearchRunOptions
    from stages.cli.capacity_output import log_search, verdict_latencies
    from stages.cli.events import say
    from stages.contracts.slo_verdict import LoadgenSloRule

    return SearchRunOptions(
        out_dir=parent,
        cache_dir=settings.cache_dir(),
        rule=LoadgenSloRule(),
        verdict_latencies=verdict_latencies,
        mlflow_uri=mlflow_uri,
        log_search=log_search,
        progress=lambda line: say("probe", line),
    )


def _search(
    loaded: LoadedSpec, search: SearchSettings, parent: Path, mlflow_uri: str | None
) -> CapacityResult:
    """Run (or resume) the search, one progress line per probe; exit 130 on Ctrl-C."""
    from stages.capacity.search_runner import run_capacity_search
    from stages.cli.events import say
    from stages.collocation.launcher import LauncherInterruptedWithResult
    from stages.services.lifecycle import ServiceError

    options = _run_options(parent, mlflow_uri)
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

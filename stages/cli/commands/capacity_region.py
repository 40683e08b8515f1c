"""`collobench capacity SPEC --region A,B [--rays 5]`: the capacity region of two pipelines (asked
and answered by stages.capacity.region_question), with `--ray K --solo A=QPS,B=QPS` running a
single ray (as Dagster does), then its table: per ray the angle, the scale s certified and
estimated, both rates and x + y on axes normalised by the solo capacities (1: what pure time-
sharing gives)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from stages.capacity.region import OptionsT, RegionInputError, RunSearch
from stages.capacity.region_question import answer_region, region_asked
from stages.cli.console import err, fail_input, out
from stages.cli.render import fmt
from stages.contracts.capacity_files import (
    REGION_FILE,
    RayResult,
    RegionResult,
    SearchSettings,
    SoloCapacity,
)
from stages.contracts.errors import ExitCode
from stages.validation.loading import LoadedSpec

RegionOption = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="Two pipelines A,B: search their capacity region (each alone, then rays of "
        "offered rates s cos t C_A, s sin t C_B), each by its own slo_ms.",
    ),
]
RaysOption = Annotated[
    int, typer.Option("--rays", help="--region: rays strictly inside the quadrant.")
]
RayOption = Annotated[
    int | None,
    typer.Option("--ray", help="--region: run only ray K (1..rays) of region --search-id."),
]
SoloOption = Annotated[
    str | None,
    typer.Option("--solo", help="--ray: the solo capacities to scale by, A=QPS,B=QPS."),
]
"""The region's options, for the `capacity` command to declare (default --rays: 5)."""


def refuse_region_conflicts(
    pipeline: str | None, slo_ms: float | None, with_rates: list[str] | None
) -> None:
    """--region decides each pipeline by its own SLO, alone or beside the other only: it takes
    neither --pipeline, --slo-ms nor --with (exit 2, one line)."""
    given = [
        flag
        for flag, value in (("--pipeline", pipeline), ("--slo-ms", slo_ms), ("--with", with_rates))
        if value
    ]
    if given:
        raise fail_input(
            [f"--region takes no {', '.join(given)}: each pipeline runs by its spec's slo_ms"]
        )


def run_region_command(
    spec_path: Path,
    loaded: LoadedSpec,
    region: str,
    rays: int,
    *,
    options: OptionsT,
    settings_template: SearchSettings,
    run_search: RunSearch[OptionsT],
    region_id: str | None = None,
    ray: int | None = None,
    solo: str | None = None,
    report: Callable[[Path], Path] | None = None,
) -> RegionResult | RayResult:
    """The region (or with `ray`, one ray of it; stages.capacity.region_question), its table
    and where it was written. Bad input exits 2 with one line; Ctrl-C exits 130 saying how to
    resume (finished searches and probes are kept). `report(region_dir)` writes the region's
    plot and returns its path."""
    try:
        asked = region_asked(loaded, region, rays, region_id, ray, solo)
        region_id = asked.region_id
        result = answer_region(
            loaded,
            asked,
            options=options,
            settings_template=settings_template,
            run_search=run_search,
        )
    except RegionInputError as error:
        raise fail_input([str(error)]) from None
    except KeyboardInterrupt:
        err.print(
            f"interrupted: resume with --region {region} --rays {rays} --resume {region_id} "
            f"(spec {spec_path})",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    if isinstance(result, RayResult):
        _print_ray(result, asked.pipelines, options.out_dir)
    else:
        _print_region(result, options.out_dir / result.region_id, report)
    return result


def _print_ray(result: RayResult, pipelines: tuple[str, str], out_dir: Path) -> None:
    table = _ray_table(pipelines)
    table.add_row(*_ray_cells(result, pipelines))
    out.print(table)
    out.print(f"search: {out_dir / result.search_id}", markup=False, highlight=False)


def _ray_table(pipelines: tuple[str, str]) -> Table:
    table = Table(title="capacity region", title_justify="left")
    for column in (
        "ray",
        "angle",
        "s certified",
        "s estimate [95% CI]",
        f"{pipelines[0]} q/s",
        f"{pipelines[1]} q/s",
        "x + y",
        "stop",
        "probes",
    ):
        table.add_column(column)
    return table


def _ray_cells(ray: RayResult, pipelines: tuple[str, str]) -> tuple[str, ...]:
    estimate = fmt(ray.estimate_s, "{:.3f}")
    if ray.estimate_ci95_s is not None:
        low, high = ray.estimate_ci95_s
        estimate = f"{estimate} [{low:.3f}, {high:.3f}]"
    point = ray.certified_point or {}
    total = None if ray.normalised is None else sum(ray.normalised)
    return (
        str(ray.index),
        f"{ray.angle_deg:.1f}°",
        fmt(ray.certified_s, "{:.3f}"),
        estimate,
        fmt(point.get(pipelines[0]), "{:.1f}"),
        fmt(point.get(pipelines[1]), "{:.1f}"),
        fmt(total, "{:.2f}"),
        ray.stop_reason,
        str(ray.probes),
    )


def _solo_line(solo: SoloCapacity) -> str:
    interval = ""
    if solo.estimate_ci95 is not None:
        interval = f" [{solo.estimate_ci95[0]:.1f}, {solo.estimate_ci95[1]:.1f}]"
    scaling = (
        "-" if solo.scaling_qps is None else f"{solo.scaling_qps:.1f} q/s ({solo.scaling_source})"
    )
    return (
        f"{solo.pipeline} alone (SLO {solo.slo_ms:g} ms): certified "
        f"{fmt(solo.certified_qps)} q/s, estimate {fmt(solo.estimate_qps)}{interval} q/s, "
        f"{solo.stop_reason}; rays scale by {scaling}"
    )


def _print_region(
    region: RegionResult, region_dir: Path, report: Callable[[Path], Path] | None
) -> None:
    for name in region.pipelines:
        out.print(_solo_line(region.solo[name]), markup=False, highlight=False)
    if region.note is not None:
        out.print(region.note, markup=False, highlight=False)
    table = _ray_table(region.pipelines)
    for ray in region.rays:
        table.add_row(*_ray_cells(ray, region.pipelines))
    out.print(table)
    out.print(
        "x + y: offered rates over the solo capacities, summed; 1 is pure time-sharing, "
        "above 1 the pair shares the machine better than taking turns",
        markup=False,
        highlight=False,
    )
    out.print(f"region: {region_dir / REGION_FILE}", markup=False, highlight=False)
    if report is not None:
        out.print(f"plot: {report(region_dir)}", markup=False, highlight=False)

"""`collobench run`: launch a benchmark with a live progress display, then print its summary,
load it into the warehouse, show the tables the summary lacks and write its report files."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.commands.report import load_and_show_results, write_report_files
from stages.cli.console import err, fail_input, out
from stages.cli.events import progress_display, say, warn
from stages.cli.options import DbOption, OverridesOption
from stages.cli.summary_table import summary_table
from stages.cli.wiring import log_to_mlflow, summarize_phase
from stages.contracts.errors import ExitCode
from stages.validation.loading import load_spec

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file.", show_default=False)],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Parent folder of the run directory (default: runs/ in $COLLOBENCH_RESULTS_DIR "
            "or the home).",
        ),
    ] = None,
    overrides: OverridesOption = None,
    mlflow: Annotated[
        bool, typer.Option("--mlflow/--no-mlflow", help="Record the run in MLflow.")
    ] = True,
    db: DbOption = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Name of the run directory (letters, digits, '.', '_', '-'); default: "
            "<UTC time>-<spec name>-<random>. Dagster passes one so it knows the folder.",
        ),
    ] = None,
    load: Annotated[
        bool,
        typer.Option(
            "--load/--no-load",
            help="Load the run into DuckDB and write its report and trace (Dagster's "
            "`warehouse` asset does both itself, so its runs pass --no-load).",
        ),
    ] = True,
) -> None:
    """Run a benchmark: solo baselines, then the pipelines collocated; write a run directory,
    load it into DuckDB and record it in MLflow. `--set` overrides are recorded in the
    manifest (`overrides`)."""
    startup = {"cli_ready": time.monotonic_ns()}  # the manifest's `startup` (from exec)
    if run_id is not None and not RUN_ID_PATTERN.fullmatch(run_id):
        raise fail_input([f"--run-id: {run_id!r} is not a folder name ({RUN_ID_PATTERN.pattern})"])
    loaded = load_spec(spec, overrides or [])  # a SpecError: exit 2 (stages.cli.errors)
    startup["spec_loaded"] = time.monotonic_ns()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mlflow_uri = settings.mlflow_tracking_uri() if mlflow else None
    result = _launch(loaded, out_dir, mlflow_uri, run_id, startup)
    out.print(summary_table(result))
    db_path = db or settings.duckdb_path()
    if load and load_and_show_results(result.run_dir, result.run_id, db_path):
        try:
            write_report_files(db_path, result.run_id, None)
        except Exception as error:  # the run is on disk: a report failure is only a warning
            err.print(f"warning: could not write the report or trace: {error}", markup=False)
    _report_outcome(result, mlflow_uri)


def _launch(
    loaded: Any,
    out_dir: Path | None,
    mlflow_uri: str | None,
    run_id: str | None,
    startup: dict[str, int],
) -> Any:
    """Run the benchmark under the progress display; its RunResult. The launcher's errors
    (it cannot start: exit 2; a foreign process on its device: 3, a manifest with status
    device_busy and no data; interrupted: 130, what was measured kept) end the command through
    stages.cli.errors. `startup`: the command's own marks, the process start added."""
    from stages.rundir.arrow_pandas import skip_pandas_check

    skip_pandas_check()  # before the launcher's first Arrow array (its import builds one)
    from stages.collocation.launcher import RunOptions, run_benchmark
    from stages.collocation.startup import process_start_ns

    if (process_ns := process_start_ns()) is not None:
        startup["process_start"] = process_ns

    display = progress_display()
    options = RunOptions(
        out_dir=out_dir or settings.runs_dir(),
        cache_dir=settings.cache_dir(),
        mlflow_uri=mlflow_uri,
        run_id=run_id,
        progress=display.update,
        summarize_phase=summarize_phase,
        log_to_mlflow=log_to_mlflow,
        startup=startup,
    )
    with display:
        return run_benchmark(loaded, options)


def _report_outcome(result: Any, mlflow_uri: str | None) -> None:
    """The run's warnings, where it is, its MLflow run; exit 1 with one line per failed
    pipeline when some failed."""
    for warning in result.warnings:
        warn(warning)
    where = {"run_id": result.run_id, "run_dir": str(result.run_dir), "status": result.status}
    say("run_end", f"run directory: {result.run_dir}", **where)
    if result.mlflow_run_id:
        mlflow_line = f"mlflow run: {result.mlflow_run_id} ({mlflow_uri})"
        say("mlflow_run", mlflow_line, mlflow_run_id=result.mlflow_run_id)
    if result.failed:
        for outcome in result.failed:
            err.print(
                f"{outcome.pipeline} (trial {outcome.trial}, {outcome.phase}): "
                f"{outcome.status}: {outcome.error}",
                markup=False,
            )
        raise typer.Exit(ExitCode.FAILED_RUN)

"""The `collobench` command line.

Exit codes: 0 success; 1 a run finished with failed pipelines (their data kept); 2 invalid input
(one `path: message` line per problem on stderr, never a traceback), which includes a warehouse
that cannot be used: busy past COLLOBENCH_WAREHOUSE_WAIT_S, or a schema version newer (or, for
readers, older) than this collobench; 130 interrupted.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core
from rich.console import Console
from rich.live import Live
from rich.table import Table

from stages import settings
from stages.cli.artifacts import artifacts_app
from stages.spec.checks import one_line
from stages.spec.loading import LoadedSpec, SpecError, load_spec


class _OneLineUsageErrors(typer.core.TyperGroup):
    """Click prints a usage error (an unknown option, a missing argument) as usage, a hint and
    the error, four lines; the contract is one `where: reason` line per problem and exit 2,
    `where` being the command path (`collobench sql`)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            code = super().main(*args, **{**kwargs, "standalone_mode": False})
        except typer.Abort:
            err.print("Aborted!", markup=False, highlight=False)
            sys.exit(1)
        except typer.TyperException as error:  # click's ClickException and UsageError
            if type(error).__name__ == "NoArgsIsHelpError":  # `collobench` alone: the help
                error.show()  # type: ignore[attr-defined]
                sys.exit(EXIT_INVALID_INPUT)
            context = getattr(error, "ctx", None)
            where = context.command_path if context is not None else "collobench"
            format_message = getattr(error, "format_message", None)
            message = format_message() if callable(format_message) else str(error)
            err.print(
                one_line(f"{where}: {message}"), markup=False, highlight=False, soft_wrap=True
            )
            sys.exit(getattr(error, "exit_code", EXIT_INVALID_INPUT))
        # non-standalone click returns a typer.Exit's code, or the command's value (None)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="collobench",
    cls=_OneLineUsageErrors,
    help="Collocated ML pipeline benchmarks: validate specs, run them, query the results.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(artifacts_app, name="artifacts")
out = Console()
if not out.is_terminal:
    out = Console(width=160)  # logs and pipes: do not squeeze tables into 80 columns
err = Console(stderr=True)

EXIT_FAILED_PIPELINES = 1
EXIT_INVALID_INPUT = 2
EXIT_INTERRUPTED = 130
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _fail_input(lines: list[str]) -> typer.Exit:
    for line in lines:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_INVALID_INPUT)


def _load(path: Path, overrides: list[str] | None = None) -> LoadedSpec:
    try:
        return load_spec(path, overrides or [])
    except SpecError as error:
        raise _fail_input(error.lines()) from None


@app.command()
def validate(
    specs: Annotated[list[Path], typer.Argument(help="Spec YAML files.", show_default=False)],
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a value: path=value (e.g. pipelines.0.loadgen.rate=50)."
        ),
    ] = None,
) -> None:
    """Check spec files; print each one's hash, or one line per problem (exit 2)."""
    problems: list[str] = []
    for path in specs:
        try:
            loaded = load_spec(path, overrides or [])
        except SpecError as error:
            problems += error.lines()
            continue
        pipelines = ", ".join(p.name for p in loaded.spec.pipelines)
        out.print(f"{path}: ok ({pipelines}; spec hash {loaded.spec_hash[:12]})", highlight=False)
    if problems:
        raise _fail_input(problems)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec (for editor autocompletion)."""
    from stages.spec.schema import spec_json_schema

    sys.stdout.write(json.dumps(spec_json_schema(), indent=2) + "\n")


@app.command()
def graph(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file.", show_default=False)],
) -> None:
    """Print each pipeline's stage graph as Mermaid text."""
    from stages.runtime.graph import StageGraph

    loaded = _load(spec)
    for pipeline in loaded.spec.pipelines:
        sys.stdout.write(f"%% pipeline {pipeline.name}\n")
        sys.stdout.write(StageGraph.from_pipeline(pipeline).mermaid() + "\n")


@app.command()
def run(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file.", show_default=False)],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Parent folder of the run directory.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a value: path=value (e.g. pipelines.0.loadgen.rate=50)."
        ),
    ] = None,
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
    from stages.collocation.launcher import (
        LauncherInterruptedWithResult,
        LaunchError,
        RunOptions,
        run_benchmark,
    )

    if run_id is not None and not RUN_ID_PATTERN.fullmatch(run_id):
        raise _fail_input([f"--run-id: {run_id!r} is not a folder name ({RUN_ID_PATTERN.pattern})"])
    loaded = _load(spec, overrides)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    display = _ProgressDisplay(loaded)
    options = RunOptions(
        out_dir=out_dir or settings.runs_dir(),
        cache_dir=settings.cache_dir(),
        mlflow_uri=settings.mlflow_tracking_uri() if mlflow else None,
        run_id=run_id,
        progress=display.update,
        summarize_phase=summarize_phase,
        log_to_mlflow=_log_to_mlflow,
    )
    try:
        with display:
            result = run_benchmark(loaded, options)
    except LaunchError as error:
        raise _fail_input([f"{spec}: {error}"]) from None
    except LauncherInterruptedWithResult as interrupted:
        err.print(f"interrupted; kept what was measured in {interrupted.result.run_dir}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    out.print(_summary_table(result))
    db_path = db or settings.duckdb_path()
    if load and _load_and_show_results(result.run_dir, result.run_id, db_path):
        try:
            _write_report_files(db_path, result.run_id, None)
        except Exception as error:  # the run is on disk: a report failure is only a warning
            err.print(f"warning: could not write the report or trace: {error}", markup=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    out.print(f"run directory: {result.run_dir}", highlight=False)
    if result.mlflow_run_id:
        out.print(f"mlflow run: {result.mlflow_run_id} ({options.mlflow_uri})", highlight=False)
    if result.failed:
        for outcome in result.failed:
            err.print(
                f"{outcome.pipeline} (trial {outcome.trial}, {outcome.phase}): "
                f"{outcome.status}: {outcome.error}",
                markup=False,
            )
        raise typer.Exit(EXIT_FAILED_PIPELINES)


# The CLI is the one place where `stages` calls into `analysis` (lazily, per command).


def _log_to_mlflow(run_dir: Path, tracking_uri: str) -> str | None:
    from stages.cli.mlflow_log import log_run_to_mlflow  # mlflow takes seconds to import

    return log_run_to_mlflow(run_dir, tracking_uri)


def summarize_phase(
    run_dir: Path, trial: int, phase: str
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The launcher's phase summariser: each pipeline's figures from the analysis views
    (infinite percentiles as the string "inf", so the manifest stays JSON), and the phase's
    foreign-load warnings."""
    from analysis.run_summary import headline_metrics, phase_warnings
    from analysis.run_summary import summarize_phase as summaries_of

    figures = {
        summary.pipeline: {
            name: "inf" if value == float("inf") else value
            for name, value in headline_metrics(summary, finite_only=False).items()
        }
        for summary in summaries_of(run_dir, trial, phase)
    }
    return figures, phase_warnings(run_dir, trial, phase)


# The columns `collobench report` shows per view (all of them stay available through `sql`).
REPORT_COLUMNS: dict[str, list[str]] = {
    "throughput": [
        "trial",
        "phase",
        "pipeline",
        "ok_queries",
        "dropped",
        "errors",
        "timeouts",
        "not_issued",
        "window_s",
        "queries_per_s",
        "queries_per_s_ci_low",
        "queries_per_s_ci_high",
        "samples_per_s",
    ],
    "latency": [
        "trial",
        "phase",
        "pipeline",
        "measured_queries",
        "failed_queries",
        "latency_p50_ms",
        "latency_p50_ci_low_ms",
        "latency_p50_ci_high_ms",
        "latency_p90_ms",
        "latency_p99_ms",
        "latency_p99_ci_low_ms",
        "latency_p99_ci_high_ms",
        "latency_p999_ms",
        "completed_p99_ms",
        "from_issue_p99_ms",
        "issue_delay_p50_us",
        "issue_delay_p99_us",
        "ci_method",
    ],
    "latency_by_run": [
        "phase",
        "pipeline",
        "trials",
        "latency_p50_ms",
        "latency_p50_ci_low_ms",
        "latency_p50_ci_high_ms",
        "latency_p99_ms",
        "latency_p99_ci_low_ms",
        "latency_p99_ci_high_ms",
        "queries_per_s",
        "queries_per_s_ci_low",
        "queries_per_s_ci_high",
        "ci_method",
    ],
    "stage_breakdown": [
        "trial",
        "phase",
        "pipeline",
        "stage",
        "visits",
        "join_wait_mean_ms",
        "queue_wait_p50_ms",
        "queue_wait_p99_ms",
        "service_p50_ms",
        "service_p99_ms",
    ],
    "energy": ["trial", "phase", "pipeline", "device", "energy_source", "energy_j", "mean_power_w"],
    "perf_per_watt": [
        "trial",
        "phase",
        "pipeline",
        "device",
        "energy_source",
        "queries_per_j",
        "j_per_query",
    ],
    "contention": [
        "trial",
        "pipeline",
        "throughput_ratio",
        "throughput_ratio_ci_low",
        "throughput_ratio_ci_high",
        "throughput_verdict",
        "p99_slowdown",
        "p99_slowdown_ci_low",
        "p99_slowdown_ci_high",
        "p99_verdict",
        "solo_failed",
        "collocated_failed",
        "energy_per_query_ratio",
        "ci_method",
    ],
    "interference": [
        "trial",
        "pipeline",
        "co_runner_set",
        "throughput_ratio",
        "throughput_ratio_ci_low",
        "throughput_ratio_ci_high",
        "throughput_verdict",
        "p99_slowdown",
        "p99_slowdown_ci_low",
        "p99_slowdown_ci_high",
        "p99_verdict",
        "collocated_failed",
    ],
    "energy_split": [
        "trial",
        "phase",
        "device",
        "pipeline",
        "method",
        "share",
        "energy_j",
        "total_energy_j",
        "energy_source",
    ],
    "accuracy": [
        "trial",
        "phase",
        "pipeline",
        "stage",
        "graded",
        "correct",
        "accuracy",
        "accuracy_ci_low",
        "accuracy_ci_high",
        "ci_method",
    ],
    "training": [
        "trial",
        "phase",
        "pipeline",
        "stage",
        "steps",
        "first_loss",
        "last_loss",
        "min_loss",
        "tail_mean_loss",
    ],
    "goodput": [
        "trial",
        "phase",
        "pipeline",
        "slo_ms",
        "queries",
        "good_queries",
        "goodput_share",
        "goodput_share_ci_low",
        "goodput_share_ci_high",
        "goodput_per_s",
        "queries_per_s",
        "ci_method",
    ],
    "tokens": [
        "trial",
        "phase",
        "pipeline",
        "stage",
        "queries",
        "tokens",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "stage_ttft_p50_ms",
        "tpot_p50_ms",
        "tpot_p99_ms",
        "tokens_per_s",
    ],
    "operator_summary": [
        "trial",
        "phase",
        "pipeline",
        "stage",
        "operator",
        "calls",
        "self_cpu_ms",
        "self_share",
    ],
    "contention_by_run": [
        "phase",
        "pipeline",
        "trials",
        "throughput_ratio",
        "throughput_ratio_ci_low",
        "throughput_ratio_ci_high",
        "throughput_verdict",
        "p99_slowdown",
        "p99_slowdown_ci_low",
        "p99_slowdown_ci_high",
        "p99_verdict",
        "ci_method",
    ],
}

DbOption = Annotated[
    Path | None, typer.Option("--db", help="DuckDB file (default: .collobench/results.duckdb).")
]


@app.command()
def load(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories.", show_default=False)],
    db: DbOption = None,
) -> None:
    """Load run directories into DuckDB; loading a run again replaces it (idempotent)."""
    from analysis.db import WarehouseError
    from analysis.loader import LoadError, load_runs

    db_path = db or settings.duckdb_path()
    try:
        results = load_runs(run_dirs, db_path)
    except (LoadError, WarehouseError) as error:
        # WarehouseError: the writer lock or another program held the warehouse past
        # COLLOBENCH_WAREHOUSE_WAIT_S, or its schema is newer than this collobench: exit 2
        raise _fail_input([str(error)]) from None
    for loaded in results:
        verb = "replaced" if loaded.replaced else "loaded"
        counts = ", ".join(f"{rows} {table}" for table, rows in loaded.rows.items() if rows)
        out.print(f"{verb} {loaded.run_id} ({loaded.status}): {counts}", highlight=False)
    out.print(f"database: {db_path}", highlight=False)


@app.command()
def report(
    run_id: Annotated[str | None, typer.Argument(help="Run id (default: latest).")] = None,
    db: DbOption = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for report.md, its plots and trace.json (default: the run directory).",
        ),
    ] = None,
) -> None:
    """Print throughput, latency, stage breakdown, energy and contention for a run; write
    report.md with PNG plots and a Perfetto trace (trace.json) beside it."""
    from analysis.db import WarehouseError
    from analysis.report import latest_run_id
    from analysis.report import report as build_report

    db_path = db or settings.duckdb_path()
    try:
        chosen = run_id if run_id is not None else latest_run_id(db_path)
        tables = build_report(db_path, chosen)
    except WarehouseError as error:  # busy past the wait, or an older/newer schema version
        raise _fail_input([str(error)]) from None
    except (LookupError, FileNotFoundError) as error:
        raise _fail_input([str(error).strip("'\"")]) from None
    for name, frame in _shown_tables(tables).items():
        wanted = REPORT_COLUMNS.get(name)
        if wanted is None:
            continue
        if name == "goodput" and frame["slo_ms"].isna().all():
            continue  # no pipeline sets slo_ms: nothing defines a good query
        out.print(_compact_table(name, frame, wanted))
    out.print('every column of every view: collobench sql "SELECT * FROM <view>"', highlight=False)
    try:
        _write_report_files(db_path, chosen, out_dir)
    except OSError as error:
        raise _fail_input([f"{out_dir or chosen}: {error.strerror or error}"]) from None


def _shown_tables(tables: dict[str, Any]) -> dict[str, Any]:
    """The report tables worth a terminal table, in order: empty ones dropped; `contention`
    (and `contention_by_run`) cut to the full collocated phase, one row per pipeline, since
    `interference` lists every co-runner set and is shown only when the run has subset phases
    (`collocation.subsets`); `energy_split` only when some window's energy was measured."""
    shown: dict[str, Any] = {}
    for name, frame in tables.items():
        if name in ("contention", "contention_by_run"):
            frame = frame[frame["phase"] == "collocated"]
        if name == "interference" and not frame["phase"].str.startswith("collocated:").any():
            continue
        if name == "energy_split" and frame["total_energy_j"].isna().all():
            continue
        if not frame.empty:
            shown[name] = frame
    return shown


def _write_report_files(db_path: Path, run_id: str, out_dir: Path | None) -> None:
    """Write report.md with its plots and trace.json (analysis.report_file, analysis.trace)
    and print where they went."""
    from analysis.report_file import write_report
    from analysis.trace import write_trace

    files = write_report(db_path, run_id, out_dir)
    trace = write_trace(db_path, run_id, out_dir)
    out.print(f"report: {files.report_md}", highlight=False, soft_wrap=True)
    for path in files.plots.values():
        out.print(f"plot: {path}", highlight=False, soft_wrap=True)
    capped = f"; {trace.capped_tracks} track(s) capped" if trace.capped_tracks else ""
    out.print(
        f"trace: {trace.path} ({trace.slices} slices, {trace.counters} counter samples{capped}; "
        "open in https://ui.perfetto.dev)",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run read-only.", show_default=False)],
    db: DbOption = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (the terminal), csv, json (one array of objects) or parquet (needs --out).",
        ),
    ] = "table",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write csv, json or parquet to this file.")
    ] = None,
) -> None:
    """Run one SQL query on the results database, over a read-only connection; print it as a
    table, CSV or JSON, or write it to a file (csv, json, parquet)."""
    import duckdb

    from analysis.export import FORMATS, query_arrow, table_rows, to_csv, to_json, write_parquet

    if output_format not in FORMATS:
        raise _fail_input([f"--format: {output_format!r} is not one of {', '.join(FORMATS)}"])
    if output_format == "parquet" and out_file is None:
        raise _fail_input(["--format: parquet is a binary file; name it with --out FILE"])
    if output_format == "table" and out_file is not None:
        raise _fail_input(["--out: the table format is for the terminal; use csv, json or parquet"])
    from analysis.db import ReadOnlyRequired, WarehouseError

    try:
        table = query_arrow(db or settings.duckdb_path(), query)
    except WarehouseError as error:  # busy past the wait, or an older/newer schema version
        raise _fail_input([str(error)]) from None
    except FileNotFoundError as error:
        raise _fail_input([str(error).strip("'\"")]) from None
    except ReadOnlyRequired as error:  # not one SELECT: refused before the warehouse opened
        raise _fail_input([f"sql: {error}"]) from None
    except duckdb.Error as error:
        lines = str(error).splitlines() or [type(error).__name__]
        raise _fail_input([f"sql: {lines[0]}"]) from None
    if output_format == "table":
        out.print(_frame_table(None, table.column_names, table_rows(table)))
        return
    try:
        if output_format == "parquet":
            assert out_file is not None
            write_parquet(table, out_file)
        else:
            text = to_json(table) + "\n" if output_format == "json" else to_csv(table)
            if out_file is None:
                sys.stdout.write(text)  # nothing else goes to stdout: pipe it into jq or a file
                return
            out_file.parent.mkdir(parents=True, exist_ok=True)
            out_file.write_text(text, encoding="utf-8")
    except (OSError, ValueError) as error:  # an unwritable --out, a NUL byte in it
        raise _fail_input([f"--out: {getattr(error, 'strerror', None) or error}"]) from None
    err.print(
        f"wrote {table.num_rows} rows to {out_file}", markup=False, highlight=False, soft_wrap=True
    )


# What `collobench compare` shows; ratio_ci_low/high fold into the ratio's cell.
COMPARE_COLUMNS = [
    "trial",
    "phase",
    "pipeline",
    "metric",
    "a_value",
    "b_value",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "verdict",
    "a_failed_queries",
    "b_failed_queries",
    "ci_method",
]


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="Baseline run id (A).", show_default=False)],
    run_b: Annotated[str, typer.Argument(help="Run id compared with it (B).", show_default=False)],
    db: DbOption = None,
    allow_different_specs: Annotated[
        bool,
        typer.Option("--allow-different-specs", help="Compare runs whose spec hashes differ."),
    ] = False,
) -> None:
    """Compare run B with run A per pipeline and phase: throughput and p50/p99 latency as
    ratios B / A with 95% intervals, and a verdict (faster, slower, no measurable change)."""
    from analysis.compare import SpecMismatch, UnknownRun, compare_runs
    from analysis.db import WarehouseError

    db_path = db or settings.duckdb_path()
    try:
        frame = compare_runs(db_path, run_a, run_b, allow_different_specs)
    except WarehouseError as error:  # busy past the wait, or an older/newer schema version
        raise _fail_input([str(error)]) from None
    except FileNotFoundError as error:
        raise _fail_input([str(error).strip("'\"")]) from None
    except UnknownRun as error:
        raise _fail_input([f"{db_path}: {str(error).strip(chr(39) + chr(34))}"]) from None
    except SpecMismatch as error:
        raise _fail_input([f"{run_b}: {error}"]) from None
    frame = frame.astype({"trial": object})
    frame.loc[frame["trial"].isna(), "trial"] = "all"
    title = (
        f"{run_b} (B) against {run_a} (A): ratio B / A [95% interval]; "
        "trial 'all' = over the trials"
    )
    out.print(_compact_table(title, frame, COMPARE_COLUMNS))


def _load_and_show_results(run_dir: Path, run_id: str, db_path: Path) -> bool:
    """Load a finished run into DuckDB (as the Dagster warehouse asset does) and show what the
    summary does not: accuracy, training loss, tokens (TTFT/TPOT), performance per watt, the
    energy split, contention and interference, each when the run has it; a failure here is a
    warning, the run is on disk. True when the run was loaded."""
    from analysis.loader import load_runs
    from analysis.report import report as build_report

    try:
        load_runs([run_dir], db_path)
        tables = build_report(db_path, run_id)
    except Exception as error:
        err.print(f"warning: could not load the run into {db_path}: {error}", markup=False)
        return False
    titles = {
        "accuracy": "accuracy (graded samples of measured queries; [Wilson 95% interval])",
        "training": "training (loss per optimiser step)",
        "tokens": "tokens (TTFT from arrival and in the stage, TPOT; ms; tokens/s)",
        "perf_per_watt": "performance per watt (energy source named; model_estimate = a model)",
        "energy_split": "energy split (an attribution by utilisation share, method named; "
        "total_energy_j measured)",
        "contention": "contention per trial (collocated vs solo; [95% interval])",
        "contention_by_run": "contention over the trials (geometric mean; [95% interval])",
        "interference": "interference per trial (each pipeline with each co-runner set vs solo; "
        "[95% interval])",
    }
    shown = _shown_tables(tables)
    for name, title in titles.items():
        frame = shown.get(name)
        if frame is None:
            continue
        if name == "contention_by_run" and int(frame["trials"].max()) < 2:
            continue  # one trial: the per-trial table says it all
        if name == "perf_per_watt" and frame["energy_source"].isna().all():
            continue  # nothing measured energy (no NVML, RAPL or power model): no table
        out.print(_compact_table(title, frame, REPORT_COLUMNS[name]))
    out.print(f"loaded into {db_path}; full report: collobench report {run_id}", highlight=False)
    return True


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


def _ci_names(name: str) -> tuple[str, str]:
    """The names of a figure's interval bounds, as the views and summaries spell them:
    `x_ci_low` / `x_ci_high`, with a `_ms` unit kept last (`x_ms` -> `x_ci_low_ms`)."""
    stem, unit = (name[:-3], "_ms") if name.endswith("_ms") else (name, "")
    return f"{stem}_ci_low{unit}", f"{stem}_ci_high{unit}"


def _with_interval(value: Any, low: Any, high: Any, fmt: Callable[[Any], str] = _cell) -> str:
    """`value [low, high]`, or the value alone when a bound is missing (None or NaN)."""
    if low is None or high is None or _cell(low) == "-" or _cell(high) == "-":
        return fmt(value)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def _interval_columns(columns: list[str]) -> list[tuple[str, str | None, str | None]]:
    """(column, its ci_low column, its ci_high column) for each column shown, the interval
    columns folded into the value's (`x_ci_low` / `x_ci_low_ms` beside `x` / `x_ms`)."""
    shown = set(columns)
    folded: list[tuple[str, str | None, str | None]] = []
    for column in columns:
        if "_ci_low" in column or "_ci_high" in column:
            continue
        low, high = _ci_names(column)
        if low in shown and high in shown:
            folded.append((column, low, high))
        else:
            folded.append((column, None, None))
    return folded


def _compact_table(title: str | None, frame: Any, columns: list[str]) -> Table:
    """A view's rows with each figure and its interval in one cell: `value [low, high]`."""
    present = [c for c in columns if c in frame.columns]
    table = Table(title=title, title_justify="left")
    folded = _interval_columns(present)
    for column, _, _ in folded:
        table.add_column(column)
    for row in frame.to_dict("records"):
        table.add_row(
            *(
                _with_interval(row[column], low and row[low], high and row[high])
                for column, low, high in folded
            )
        )
    return table


def _frame_table(title: str | None, columns: list[str], rows: Any) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    return table


# --------------------------------------------------------------------------- display


def _rate(outcome: dict[str, Any]) -> float | None:
    first, last = outcome.get("first_issue_ns"), outcome.get("last_completed_ns")
    if not first or not last or last <= first:
        return None
    return float(outcome.get("ok", 0)) / ((last - first) / 1e9)


def _fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    return "-" if value is None else pattern.format(value)


class _ProgressDisplay:
    """Live per-pipeline progress on a terminal; one line per phase otherwise (CI logs)."""

    def __init__(self, loaded: LoadedSpec) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.phase = ""
        self.interactive = out.is_terminal
        self._live: Live | None = None
        self._phase_started = 0.0

    def __enter__(self) -> _ProgressDisplay:
        if self.interactive:
            self._live = Live(self._table(), console=out, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def update(self, event: Any) -> None:
        if event.kind == "phase_start":
            self.phase = f"trial {event.trial} · {event.phase}"
            self.rows = {name: {"status": "preparing"} for name in event.data["pipelines"]}
            self._phase_started = time.monotonic()
            if not self.interactive:
                out.print(f"{self.phase}: {', '.join(event.data['pipelines'])}", highlight=False)
        elif event.kind in ("progress", "done") and event.pipeline:
            row = dict(event.data)
            row["status"] = row["status"] if event.kind == "done" else "running"
            self.rows[event.pipeline] = row
        elif event.kind == "phase_end":
            elapsed_s = time.monotonic() - self._phase_started
            for outcome in event.data["outcomes"]:
                out.print(f"  {_phase_line(outcome)} ({elapsed_s:.1f} s)", highlight=False)
        if self._live is not None:
            self._live.update(self._table())

    def _table(self) -> Table:
        table = Table(title=self.phase or "starting", title_justify="left")
        columns = ("pipeline", "status", "issued", "ok", "dropped", "errors", "q/s", "live p99 ms")
        for column in columns:
            table.add_column(
                column, justify="left" if column in ("pipeline", "status") else "right"
            )
        for name, row in self.rows.items():
            table.add_row(
                name,
                str(row.get("status", "")),
                str(row.get("issued", "")),
                str(row.get("ok", "")),
                str(row.get("dropped", "")),
                str(row.get("errors", "")),
                _fmt(_rate(row)),
                _fmt(row.get("live_p99_ms"), "{:.2f}"),
            )
        return table


def _interval(figures: dict[str, Any], name: str) -> str:
    """A summary's figure `name` with its interval; `inf` for an infinite percentile."""
    low, high = _ci_names(name)
    return _with_interval(figures.get(name), figures.get(low), figures.get(high))


def _phase_line(outcome: dict[str, Any]) -> str:
    """One pipeline at the end of a phase: the figures the analysis views computed (the same
    as the summary, the manifest and MLflow), or the worker's live counts without them."""
    figures = outcome.get("summary")
    if not figures:
        return (
            f"{outcome['pipeline']}: {outcome['status']}, {outcome['ok']} ok, "
            f"{outcome['dropped']} dropped, {outcome['errors']} errors, {_fmt(_rate(outcome))} "
            f"q/s, live p99 {_fmt(outcome.get('live_p99_ms'), '{:.2f}')} ms"
        )
    target = f"p{float(figures.get('target_percentile', 0.99)) * 100:g}"
    return (
        f"{outcome['pipeline']}: {outcome['status']}, {int(figures.get('queries_ok', 0))} ok of "
        f"{int(figures.get('queries_measured', 0))} measured "
        f"({int(figures.get('queries_failed', 0))} failed), "
        f"{_interval(figures, 'queries_per_s')} q/s, "
        f"{target} {_interval(figures, 'latency_target_ms')} ms "
        f"(completed only {_cell(figures.get('completed_target_ms'))} ms)"
    )


def _summary_table(result: Any) -> Table:
    """Headline figures per pipeline and phase, from the warehouse's views over the run
    directory (warm-up excluded): ok and failed queries, q/s and the scenario's verdict
    percentile (failures count as infinite) with their 95% intervals, the completed-only p99,
    LoadGen's early-stopping bound and the SLO verdict by LoadGen's rule."""
    from analysis.run_summary import summarize_run  # the CLI is the one place stages meets analysis

    def one_decimal(value: Any) -> str:
        return _fmt(value, "{:.1f}")

    def two_decimals(value: Any) -> str:
        return _fmt(value, "{:.2f}")

    statuses = {(o.trial, o.phase, o.pipeline): o.status for o in result.results}
    table = Table(
        title="summary (warm-up excluded; latency in ms, failures count as inf; [95% interval])",
        title_justify="left",
    )
    for column in (
        "trial",
        "phase",
        "pipeline",
        "status",
        "ok",
        "failed",
        "q/s",
        "verdict",
        "completed p99",
        "bound",
        "SLO",
    ):
        table.add_column(column, no_wrap=True)
    for row in summarize_run(result.run_dir):
        if row.slo_met is None:
            slo = "-"
        elif row.slo_met:
            slo = "met"
        else:  # LoadGen calls a run too short for its verdict INVALID, not a miss
            slo = "unproven" if row.latency_bound_ms is None else "missed"
        target = f"p{row.target_percentile * 100:g}"
        table.add_row(
            str(row.trial),
            row.phase,
            row.pipeline,
            statuses.get((row.trial, row.phase, row.pipeline), "?"),
            str(row.ok),
            str(row.failed),
            _with_interval(
                row.throughput_qps, row.throughput_ci_low, row.throughput_ci_high, one_decimal
            ),
            f"{target} "
            + _with_interval(
                row.latency_target_ms,
                row.latency_target_ci_low_ms,
                row.latency_target_ci_high_ms,
                two_decimals,
            ),
            _fmt(row.completed_p99_ms, "{:.2f}"),
            _fmt(row.latency_bound_ms, "{:.2f}")
            if row.latency_bound_ms is not None
            else f"- (<{row.queries_for_bound} q)",
            slo,
        )
    return table


def main() -> None:
    app()

"""`collobench ab`: a paired A/B comparison of a baseline arm A and a candidate arm B in
interleaved blocks on this machine, judged per pipeline and figure (regressed, improved,
equivalent, undecided with the smallest change it could have seen), as a table or JSON, with a
PNG of the per-block differences. The session runner is `stages.ab`, its statistics
`stages.ab.stats`; docs/design.md ("Paired A/B") explains both."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import secrets
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.console import err, fail_input, out
from stages.cli.options import DbOption, OverridesOption
from stages.contracts.errors import ExitCode


class AbFormat(StrEnum):
    table = "table"
    json = "json"


class AbMode(StrEnum):
    interleaved = "interleaved"
    duet = "duet"


class Boundary(StrEnum):
    obrien_fleming = "obrien-fleming"
    pocock = "pocock"


SpecBArgument = Annotated[
    Path | None, typer.Argument(help="Arm B's spec: a variant with the same pipelines.")
]
AaOption = Annotated[
    bool, typer.Option("--aa", help="Run arm A against itself: measures the noise.")
]
BasePythonOption = Annotated[
    Path | None, typer.Option("--base-python", help="Arm A's Python (another venv).")
]
CandidatePythonOption = Annotated[
    Path | None, typer.Option("--candidate-python", help="Arm B's Python.")
]
RepoOption = Annotated[
    Path | None, typer.Option("--repo", help="A git repository whose revisions are the arms.")
]
BaseOption = Annotated[str | None, typer.Option("--base", help="Arm A's revision.")]
CandidateOption = Annotated[str | None, typer.Option("--candidate", help="Arm B's revision.")]
AllowDirtyOption = Annotated[
    bool, typer.Option("--allow-dirty", help="Accept uncommitted changes in --repo (recorded).")
]
PipelineOption = Annotated[
    str | None, typer.Option("--pipeline", help="Judge only this pipeline's figures.")
]
MetricOption = Annotated[
    str | None,
    typer.Option(
        "--metric",
        help="Judge only this figure: queries_per_s, latency_p50_ms, latency_p99_ms, "
        "ttft_p50_ms (fewer figures: less correction, fewer blocks).",
    ),
]
MarginOption = Annotated[
    float, typer.Option("--margin-pct", help="Equivalence margin, +- %.", min=0.1)
]
BudgetOption = Annotated[
    float, typer.Option("--budget-min", help="Stop after this many minutes.", min=0.1)
]
LooksOption = Annotated[
    str, typer.Option("--looks", help="Block counts of the planned looks, e.g. 12,24,36.")
]
BoundaryOption = Annotated[
    Boundary, typer.Option("--boundary", help="How the looks spend the 5% false alarms.")
]
SeedOption = Annotated[int | None, typer.Option("--seed", help="The session's seed.")]
FormatOption = Annotated[
    AbFormat, typer.Option("--format", help="table, or json (one object per figure).")
]
PlotOption = Annotated[
    Path | None, typer.Option("--plot", help="Where to write the PNG (default: the session's).")
]
ModeOption = Annotated[
    AbMode,
    typer.Option(
        "--mode",
        help="interleaved (one arm after the other), or duet (both at once, each on half "
        "the cores, swapping every block; CPU pipelines only).",
    ),
]
ResumeOption = Annotated[
    str | None, typer.Option("--resume", help="Continue this session (its id).")
]
LoadOption = Annotated[
    bool,
    typer.Option(
        "--load/--no-load",
        help="Load the session and its segment runs into DuckDB at the end (as `collobench load`).",
    ),
]
MlflowOption = Annotated[
    bool, typer.Option("--mlflow/--no-mlflow", help="Record the session in MLflow.")
]


def ab(
    spec: Annotated[Path, typer.Argument(help="Arm A's spec (and B's, unless SPEC_B).")],
    spec_b: SpecBArgument = None,
    aa: AaOption = False,
    base_python: BasePythonOption = None,
    candidate_python: CandidatePythonOption = None,
    repo: RepoOption = None,
    base: BaseOption = None,
    candidate: CandidateOption = None,
    allow_dirty: AllowDirtyOption = False,
    overrides: OverridesOption = None,
    pipeline: PipelineOption = None,
    metric: MetricOption = None,
    margin_pct: MarginOption = 5.0,
    budget_min: BudgetOption = 15.0,
    looks: LooksOption = "12,24,36",
    boundary: BoundaryOption = Boundary.obrien_fleming,
    seed: SeedOption = None,
    output_format: FormatOption = AbFormat.table,
    plot: PlotOption = None,
    resume: ResumeOption = None,
    mode: ModeOption = AbMode.interleaved,
    db: DbOption = None,
    load: LoadOption = True,
    mlflow: MlflowOption = True,
) -> None:
    """Compare a baseline (A) and a candidate (B) in interleaved blocks: each block runs one
    short segment of each arm, in a balanced random order, with one arrival seed; the per-block
    log differences are judged with the Wilcoxon signed-rank test (Holm across figures) at
    planned looks. Exit 0 whatever the verdict; 2 on bad input; 130 when interrupted (the
    verdict so far is printed)."""
    from stages.ab.session_plan import SessionRequest

    request = SessionRequest(
        spec=spec,
        spec_b=spec_b,
        aa=aa,
        base_python=base_python,
        candidate_python=candidate_python,
        overrides=list(overrides or []),
        margin_pct=margin_pct,
        budget_min=budget_min,
        looks=looks,
        boundary=boundary.value,
        seed=seed if seed is not None else random.SystemRandom().randrange(2**31),
        resume=resume,
        repo=repo,
        base=base,
        candidate=candidate,
        allow_dirty=allow_dirty,
        pipeline=pipeline,
        metric=metric,
        mode=mode.value,
        session_id=resume or _new_session_id(spec),
        ab_dir=settings.ab_dir(),
    )
    db_path = (db or settings.duckdb_path()) if load else None
    _run(request, plot, output_format, db_path, settings.mlflow_tracking_uri() if mlflow else None)


def _run(
    request: Any,
    plot: Path | None,
    output_format: AbFormat,
    db_path: Path | None,
    tracking_uri: str | None,
) -> None:
    """Run the session, report it (and record it at `tracking_uri`), load it into `db_path`
    (None: not recorded, not loaded); exit 130 when it was interrupted."""
    from stages.ab.session_plan import run_session

    try:
        outcome = run_session(request, read_segment_figures, say_progress)
    except ValueError as error:  # a bad --looks
        raise fail_input([f"collobench ab: {error}"]) from None
    _report(outcome, plot, output_format, tracking_uri)
    if db_path is not None:
        load_session_quietly(outcome.files.folder, db_path)
    if outcome.record.status == "interrupted":
        raise typer.Exit(ExitCode.INTERRUPTED)


def _report(
    outcome: Any, plot: Path | None, output_format: AbFormat, tracking_uri: str | None
) -> None:
    """The verdicts as a table or JSON, the PNG beside them, then the MLflow record (after the
    plot, which it holds; None: not recorded)."""
    rows = result_rows(outcome)
    png: Path | None = plot or outcome.files.folder / "ab.png"
    try:
        png = _plot(outcome, plot or outcome.files.folder / "ab.png")
    except Exception as error:  # the verdict stands without its picture
        err.print(f"warning: could not write the plot: {error}", markup=False)
        png = None
    if output_format is AbFormat.json:
        print(json.dumps(rows, indent=1))
    else:
        _print_table(outcome, rows, png)
    _log_to_mlflow(outcome.files.folder, tracking_uri)


def _log_to_mlflow(folder: Path, tracking_uri: str | None) -> None:
    """One MLflow parent run for the session (`stages.cli.mlflow_ab`), named on stderr; a
    failure is a warning there, never the session's."""
    if tracking_uri is None:
        return
    from stages.cli.mlflow_ab import log_ab_session

    mlflow_run_id = log_ab_session(folder, tracking_uri)
    if mlflow_run_id is not None:
        err.print(
            f"mlflow run: {mlflow_run_id} ({tracking_uri})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _plot(outcome: Any, png: Path) -> Path | None:
    from analysis.reports.ab_plot import PlottedFigure, plot_session

    judgement = outcome.judgement
    figures = [
        PlottedFigure(
            figure=v.figure,
            block_changes_pct=[math.expm1(d) * 100 for d in judgement.log_diffs[v.figure]],
            change_pct=v.change_pct,
            change_ci95=v.change_ci95,
            verdict=v.verdict,
        )
        for v in judgement.verdicts
    ]
    return plot_session(figures, outcome.record.margin_pct, png, outcome.record.session_id)


def load_session_quietly(folder: Path, db_path: Path) -> bool:
    """Load the session and its segment runs into the warehouse (analysis.ab.warehouse_tables);
    one line on stderr either way, a failure only a warning: the session is on disk. True when
    it loaded."""
    from analysis.ab.warehouse_tables import load_ab_dirs

    try:
        load_ab_dirs([folder], db_path)
    except Exception as error:
        err.print(f"warning: could not load the session into {db_path}: {error}", markup=False)
        return False
    err.print(f"loaded into {db_path} (ab_sessions, ab_blocks, ab_verdicts)", markup=False)
    return True


def _new_session_id(spec: Path) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-ab-{spec.stem}-{secrets.token_hex(3)}"


def read_segment_figures(run_dir: Path) -> Any:
    """A segment's figures from the warehouse's views (the session runner's `ReadSegment`)."""
    from analysis.reports.ab_segment import segment_figures

    return segment_figures(run_dir)


def say_progress(line: str) -> None:
    """A session's progress line, on stderr (stdout holds only the answer)."""
    err.print(line, markup=False, highlight=False)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def result_rows(outcome: Any) -> list[dict[str, Any]]:
    """One JSON object per figure: the contract's keys first (session_id, pipeline, phase,
    metric, change_pct, change_ci95, verdict, mde_pct, blocks, blocks_dropped), then the
    detail (p-values, the 90% and paired-t intervals, the spread, the method)."""
    judgement = outcome.judgement
    rows = []
    for verdict in judgement.verdicts:
        pipeline, _, metric = verdict.figure.rpartition("/")
        rows.append(
            {
                "session_id": outcome.record.session_id,
                "pipeline": pipeline,
                "phase": outcome.phase,
                "metric": metric,
                "change_pct": verdict.change_pct,
                "change_ci95": [_finite(x) for x in verdict.change_ci95],
                "verdict": verdict.verdict,
                "mde_pct": _finite(verdict.mde_pct),
                "blocks": verdict.blocks,
                "blocks_dropped": len(judgement.dropped),
                "p_value": verdict.p_value,
                "p_holm": verdict.p_holm,
                "change_ci90": [_finite(x) for x in verdict.change_ci90],
                "paired_t_change_pct": verdict.paired_t_change_pct,
                "paired_t_ci95": [_finite(x) for x in verdict.paired_t_ci95],
                "sd_log": verdict.sd_log,
                "method": verdict.method,
                "look_alpha": outcome.look_alpha,
                "status": outcome.record.status,
            }
        )
    return rows


def _interval(pair: list[float | None]) -> str:
    low, high = (f"{x:+.1f}" if x is not None else "?" for x in pair)
    return f"[{low}, {high}]"


def _print_table(outcome: Any, rows: list[dict[str, Any]], png: Path | None) -> None:
    from rich.table import Table

    record = outcome.record
    table = Table(title=f"A/B session {record.session_id} ({record.status})")
    for column in ("pipeline", "metric", "change % [95%]", "verdict", "mde %", "blocks", "dropped"):
        table.add_column(column)
    for row in rows:
        mde = row["mde_pct"]
        table.add_row(
            row["pipeline"],
            row["metric"],
            f"{row['change_pct']:+.1f} {_interval(row['change_ci95'])}",
            row["verdict"],
            f"{mde:.1f}" if mde is not None else "inf",
            str(row["blocks"]),
            str(row["blocks_dropped"]),
        )
    out.print(table)
    for block, reason in outcome.judgement.dropped:
        out.print(f"dropped block {block + 1}: {reason}", markup=False, highlight=False)
    for warning in outcome.judgement.warnings:
        err.print(f"warning: {warning}", markup=False)
    if not rows:
        out.print("no verdict: too few complete blocks", markup=False)
    if png is not None:
        out.print(f"plot: {png}", markup=False, highlight=False)
    out.print(f"session: {outcome.files.folder}", markup=False, highlight=False)

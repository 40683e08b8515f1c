"""`collobench bisect SPEC --repo DIR --good REV --bad REV`: the first commit whose A/B session
against the good commit is decided `regressed` (`stages.ab.bisect`), with its change and
interval and every session the search ran, as a table or JSON."""

from __future__ import annotations

import datetime as dt
import json
import random
import secrets
from pathlib import Path
from typing import Annotated, Any

import typer

from stages import settings
from stages.cli.commands.ab import (
    AbFormat,
    AllowDirtyOption,
    Boundary,
    BoundaryOption,
    BudgetOption,
    FormatOption,
    LooksOption,
    MarginOption,
    MetricOption,
    PipelineOption,
    SeedOption,
    read_segment_figures,
    say_progress,
)
from stages.cli.console import out
from stages.cli.options import OverridesOption

RepoArgument = Annotated[
    Path, typer.Option("--repo", help="The git repository to search.", show_default=False)
]
GoodOption = Annotated[str, typer.Option("--good", help="A revision without the change.")]
BadOption = Annotated[str, typer.Option("--bad", help="A later revision with it.")]


def bisect(
    spec: Annotated[Path, typer.Argument(help="The spec every step runs.", show_default=False)],
    repo: RepoArgument,
    good: GoodOption,
    bad: BadOption,
    pipeline: PipelineOption = None,
    metric: MetricOption = None,
    overrides: OverridesOption = None,
    allow_dirty: AllowDirtyOption = False,
    margin_pct: MarginOption = 5.0,
    budget_min: BudgetOption = 15.0,
    looks: LooksOption = "12,24,36",
    boundary: BoundaryOption = Boundary.obrien_fleming,
    seed: SeedOption = None,
    output_format: FormatOption = AbFormat.table,
) -> None:
    """Binary-search the commits after --good up to --bad: each step is a `collobench ab`
    session of the middle commit against --good (`--budget-min` each). Prints the first
    commit decided `regressed`, with its change and interval, and the sessions it ran; a step
    that stays undecided ends the search and is named, never guessed."""
    from stages.ab.bisect import bisect as search
    from stages.ab.session_plan import SessionRequest, run_session

    session_seed = seed if seed is not None else random.SystemRandom().randrange(2**31)

    def run_step(commit: str) -> Any:
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
        request = SessionRequest(
            spec=spec,
            session_id=f"{stamp}-bisect-{commit[:10]}-{secrets.token_hex(2)}",
            ab_dir=settings.ab_dir(),
            seed=session_seed,
            repo=repo,
            base=good,
            candidate=commit,
            allow_dirty=allow_dirty,
            overrides=list(overrides or []),
            margin_pct=margin_pct,
            budget_min=budget_min,
            looks=looks,
            boundary=boundary.value,
            pipeline=pipeline,
            metric=metric,
        )
        return run_session(request, read_segment_figures, say_progress)

    result = search(repo.absolute(), good, bad, allow_dirty, run_step, say_progress)
    document = _document(result)
    if output_format is AbFormat.json:
        print(json.dumps(document, indent=1))
        return
    for step in document["steps"]:
        change = step["change_pct"]
        shown = f"{change:+.1f}% {step['change_ci95']}" if change is not None else ""
        line = f"{step['commit'][:12]} {step['verdict']:<10} {shown} ({step['session_id']})"
        out.print(f"{line}  {step['subject']}", markup=False, highlight=False)
    out.print(document["answer"], markup=False, highlight=False)


def _document(result: Any) -> dict[str, Any]:
    steps = [
        {
            "commit": s.commit,
            "subject": s.subject,
            "session_id": s.session_id,
            "verdict": s.verdict,
            "figure": s.figure,
            "change_pct": s.change_pct,
            "change_ci95": list(s.change_ci95) if s.change_ci95 else None,
        }
        for s in result.steps
    ]
    first = result.first_regressed
    if first is not None:
        answer = (
            f"first regressed commit: {first.commit} ({first.subject}): {first.figure} "
            f"{first.change_pct:+.1f}% [{first.change_ci95[0]:+.1f}, {first.change_ci95[1]:+.1f}]"
        )
    elif result.undecided is not None:
        low, high = result.range_left
        answer = (
            f"undecided at {result.undecided.commit[:12]} (session {result.undecided.session_id}):"
            f" the change lies after {low[:12]} and at or before {high[:12]}; a longer "
            "--budget-min, --looks with more blocks or one --metric would decide it"
        )
    else:
        answer = f"{result.bad[:12]} is not decided regressed against {result.good[:12]}"
    return {
        "good": result.good,
        "bad": result.bad,
        "commits": len(result.commits),
        "first_regressed": first.commit if first is not None else None,
        "answer": answer,
        "steps": steps,
    }

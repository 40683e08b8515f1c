"""The checks across runs of the `warehouse` asset, read from the benchmark's history
(analysis.history.verdicts: each figure judged against the runs before it on the same machine class,
between-run spread, change points; not one run's within-run interval):

- `regression`: fails (WARN) when a figure of this run `regressed`: a persistent shift, found
  once three runs (two at the earliest) lie past it, with its size, interval and likely cause,
  and the `collobench ab` (confirm) and `collobench bisect` (locate) commands between the
  commits either side of the change when the history recorded them.
  A first run, or a history too short to judge, passes as `undecided` and says how many runs it
  has and needs.
- `reproducibility`: a rerun of the same spec hash and seeds issued the same arrival schedule as
  the previous run of the partition (offsets from each phase's first arrival, per query id), and
  none of its figures moved beyond the between-run band (no `regressed` or `improved`); a
  failure names the cause (code, environment, machine) when one was recorded.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pandas as pd

from bench_defs.checks.warehouse_checks import (
    REGRESSION,
    REPRODUCIBILITY,
    SCHEDULE_TOLERANCE_NS,
    loaded_run,
    markdown_lines,
    sql_file,
)

# The verdict table in the checks' metadata: (header, column or value|low|high).
VERDICT_MARKDOWN = (
    ("trial", "trial"),
    ("phase", "phase"),
    ("pipeline", "pipeline"),
    ("metric", "metric"),
    ("value", "value"),
    ("verdict", "verdict"),
    ("change %", "change_pct|change_low|change_high"),
    ("smallest change seen %", "mde_pct"),
    ("cause", "cause"),
    ("why", "detail"),
)


def history_results(
    connection: Any, previous: str | None, current: str
) -> list[dg.AssetCheckResult]:
    """`regression` and `reproducibility`, both read from one judgement of the run's history."""
    from analysis.history.verdicts import run_verdicts

    verdicts = run_verdicts(connection, current)
    return [
        regression_result(current, verdicts),
        reproducibility_result(connection, previous, current, verdicts),
    ]


def regression_result(current: str, verdicts: pd.DataFrame) -> dg.AssetCheckResult:
    """Fails when any figure of the run regressed against its history."""
    regressed = verdicts[verdicts["verdict"] == "regressed"]
    if verdicts.empty:
        description = f"run {current} has no figures in the history"
    elif not regressed.empty:
        first = regressed.iloc[0]
        description = f"{len(regressed)} figure(s) regressed: {_line(first)}; {confirm_hint(first)}"
    else:
        description = _summary(verdicts, "no regression")
    return dg.AssetCheckResult(
        check_name=REGRESSION,
        passed=regressed.empty,
        severity=dg.AssetCheckSeverity.WARN,
        description=description,
        metadata=_metadata(current, verdicts, regressed),
    )


def confirm_hint(row: Any) -> str:
    """The commands that would confirm a change and find its commit: `collobench ab` between the
    commits either side of it, then `collobench bisect` over them, when the history knows two
    different commits; else an A/B session of the setup before against the one after."""
    before, after = _commit(row, "commit_before"), _commit(row, "commit_after")
    if before and after and before != after:
        return (
            f"confirm with `collobench ab SPEC --repo . --base {before} --candidate {after}`; "
            f"locate with `collobench bisect SPEC --repo . --good {before} --bad {after}`"
        )
    return (
        "confirm with `collobench ab SPEC_BEFORE SPEC_AFTER` (or --base-python / "
        "--candidate-python: the setups before and after the change, side by side)"
    )


def _commit(row: Any, column: str) -> str | None:
    value = row.get(column) if hasattr(row, "get") else None
    return None if value is None or pd.isna(value) or not str(value) else str(value)


def reproducibility_problems(
    connection: Any, previous: str | None, current: str, verdicts: pd.DataFrame
) -> list[str]:
    """Why `current` does not reproduce its history (and the previous run's schedule)."""
    problems = _schedule_problems(connection, previous, current)
    changed = verdicts[verdicts["verdict"].isin(["regressed", "improved"])]
    problems += [_line(row) for _, row in changed.iterrows()]
    return problems


def reproducibility_result(
    connection: Any, previous: str | None, current: str, verdicts: pd.DataFrame
) -> dg.AssetCheckResult:
    problems = reproducibility_problems(connection, previous, current, verdicts)
    return dg.AssetCheckResult(
        check_name=REPRODUCIBILITY,
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        description=problems[0] if problems else _summary(verdicts, "reproduced"),
        metadata={
            **_metadata(current, verdicts, verdicts[verdicts["change_pct"].notna()]),
            "schedule_compared_with": previous or "none",
            "problems": markdown_lines(problems),
        },
    )


def _schedule_problems(connection: Any, previous: str | None, current: str) -> list[str]:
    """The identical-schedule check against the partition's previous run (same spec hash)."""
    if previous is None or previous == current:
        return []
    a, b = loaded_run(connection, previous), loaded_run(connection, current)
    if a is None or b is None or a.spec_hash != b.spec_hash:
        return []
    problems = [] if a.manifest.seeds == b.manifest.seeds else ["the seeds differ"]
    row = connection.execute(
        sql_file("schedule_agreement.sql"),
        {"a": previous, "b": current, "tolerance": SCHEDULE_TOLERANCE_NS},
    ).fetchone()
    arrivals, differing = (int(row[0]), int(row[1])) if row else (0, 0)
    if differing:
        problems.append(f"{differing} of {arrivals} scheduled arrivals differ from {previous}")
    return problems


def _line(row: Any) -> str:
    """One judged figure as a sentence: where, the verdict, the change and the cause."""
    low, high = row["change_ci95"] or (float("nan"), float("nan"))
    cause = f"; cause: {row['cause']}" if row["cause"] else ""
    return (
        f"trial {row['trial']} {row['phase']} {row['pipeline']} {row['metric']}: "
        f"{row['verdict']} {row['change_pct']:+.1f}% [{low:+.1f}, {high:+.1f}] "
        f"({row['detail']}){cause}"
    )


def _summary(verdicts: pd.DataFrame, passed: str) -> str:
    """A passing check's description: the verdicts counted; for a history too short, what it
    has and needs."""
    counts = verdicts["verdict"].value_counts()
    if counts.get("undecided", 0) == len(verdicts):
        return f"undecided: {verdicts['detail'].iloc[0]}"
    shown = ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
    return f"{passed} against the history ({shown})"


def _metadata(current: str, verdicts: pd.DataFrame, shown: pd.DataFrame) -> dict[str, Any]:
    from analysis.reports.report_file import markdown_table

    table = shown.assign(
        change_low=[c[0] if c else None for c in shown["change_ci95"]],
        change_high=[c[1] if c else None for c in shown["change_ci95"]],
    )
    return {
        "run_id": current,
        **{verdict: int(count) for verdict, count in verdicts["verdict"].value_counts().items()},
        "verdicts": dg.MetadataValue.md(
            markdown_table(table, VERDICT_MARKDOWN) if not table.empty else "none"
        ),
    }

"""Run B against run A: the change in throughput and in p50/p99 latency, with intervals.

`compare_runs()` is what `collobench compare RUN_A RUN_B` prints (COMPARISON_TERMINAL under
COMPARISON_TITLE); the Dagster regression check (bench_defs.checks) calls `compare_connection()`
on its own read-only connection and fails on the rows `regressions()` keeps (COMPARISON_MARKDOWN).
A comparison has one row per (trial, phase, pipeline, metric), plus a row over the trials
(trial NULL) when both runs have two or more trials in common, each with the ratio B / A, its
95% interval and a verdict ('faster', 'slower', 'no measurable change'), and the host each run
ran on (`a_host`, `b_host`: runs from several hosts share one warehouse). Every figure is
computed in SQL (`analysis/sql/compare.sql`) from the `phase_figures` view (each phase's
`throughput` and `latency`), with the interval machinery of `contention` and
`contention_by_run`, so the numbers agree with the report.

Two runs of different specs measure different things: comparing them raises SpecMismatch
unless the caller says so (`allow_different_specs=True`); a run not loaded raises UnknownRun.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from analysis.reports.report_entries import MarkdownColumns, names
from analysis.warehouse.reader import connect_read_only, require_read_only
from analysis.warehouse.sql_files import sql_text
from stages.contracts.errors import InvalidInputError

# The columns of a comparison, in order (see analysis/sql/compare.sql for their definitions).
COLUMNS = [
    "trial",
    "trials",
    "phase",
    "pipeline",
    "metric",
    "a_value",
    "b_value",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "ci_method",
    "verdict",
    "a_failed_queries",
    "b_failed_queries",
    "a_host",
    "b_host",
]


# What `collobench compare` shows (of COLUMNS; ratio_ci_low/high fold into the ratio's cell),
# under a title naming run B and run A.
COMPARISON_TITLE = (
    "{run_b} (B, host {host_b}) against {run_a} (A, host {host_a}): ratio B / A "
    "[95% interval]; trial 'all' = over the trials"
)
COMPARISON_TERMINAL = names(
    "trial phase pipeline metric a_value b_value ratio ratio_ci_low ratio_ci_high verdict "
    "a_failed_queries b_failed_queries ci_method"
)
# The Dagster regression check's Markdown table of the figures that got worse: run A is the
# partition's previous run, run B this one (bench_defs.checks).
COMPARISON_MARKDOWN: MarkdownColumns = (
    *((key, key) for key in ("trial", "phase", "pipeline")),
    ("metric", "metric"),
    ("previous", "a_value"),
    ("this run", "b_value"),
    ("ratio", "ratio|ratio_ci_low|ratio_ci_high"),
    ("verdict", "verdict"),
)


class UnknownRun(InvalidInputError, LookupError):
    """A run id that is not loaded in the warehouse."""


class SpecMismatch(InvalidInputError, ValueError):
    """The two runs were made from specs with different hashes (or a hash is unknown)."""


def run_hosts(connection: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, str | None]:
    """run id -> the host id it ran on (`runs.host`; None when unknown)."""
    found = connection.execute(
        "SELECT run_id, host FROM runs WHERE list_contains(?, run_id)", [run_ids]
    ).fetchall()
    return {str(run_id): host for run_id, host in found}


def _spec_hashes(
    connection: duckdb.DuckDBPyConnection, run_ids: list[str]
) -> dict[str, str | None]:
    found = connection.execute(
        "SELECT run_id, spec_hash FROM runs WHERE list_contains(?, run_id)", [run_ids]
    ).fetchall()
    return {str(run_id): spec_hash for run_id, spec_hash in found}


def check_comparable(
    connection: duckdb.DuckDBPyConnection,
    run_a: str,
    run_b: str,
    allow_different_specs: bool = False,
) -> None:
    """Raise UnknownRun when a run is not loaded, SpecMismatch when the spec hashes differ
    (or one is unknown) and `allow_different_specs` is False; each with a one-line message."""
    hashes = _spec_hashes(connection, [run_a, run_b])
    missing = [run_id for run_id in dict.fromkeys([run_a, run_b]) if run_id not in hashes]
    if missing:
        names = ", ".join(repr(run_id) for run_id in missing)
        raise UnknownRun(f"no run {names} loaded")
    if allow_different_specs:
        return
    hash_a, hash_b = hashes[run_a], hashes[run_b]
    if hash_a is None or hash_b is None or hash_a != hash_b:
        raise SpecMismatch(
            f"{run_a} (spec {str(hash_a)[:12]}) and {run_b} (spec {str(hash_b)[:12]}) were "
            "made from different specs; pass --allow-different-specs "
            "(allow_different_specs=True) to compare them anyway"
        )


def compare_connection(
    connection: duckdb.DuckDBPyConnection,
    run_a: str,
    run_b: str,
    allow_different_specs: bool = False,
) -> pd.DataFrame:
    """The comparison of run B against run A on an open read-only connection (COLUMNS).

    Raises ReadOnlyRequired on a writable connection, UnknownRun, SpecMismatch."""
    require_read_only(connection)
    check_comparable(connection, run_a, run_b, allow_different_specs)
    frame = connection.execute(sql_text("compare.sql"), {"run_a": run_a, "run_b": run_b}).df()
    hosts = run_hosts(connection, [run_a, run_b])
    frame["a_host"] = hosts.get(run_a)
    frame["b_host"] = hosts.get(run_b)
    return frame[COLUMNS]


def compare_runs(
    db_path: Path | str,
    run_a: str,
    run_b: str,
    allow_different_specs: bool = False,
) -> pd.DataFrame:
    """Compare run B against run A in the warehouse at `db_path` (opened read-only).

    Raises FileNotFoundError (no warehouse), UnknownRun, SpecMismatch."""
    connection = connect_read_only(db_path)
    try:
        return compare_connection(connection, run_a, run_b, allow_different_specs)
    finally:
        connection.close()


def regressions(comparison: pd.DataFrame) -> pd.DataFrame:
    """The rows a regression check fails on: headline rows (over the trials when there are
    several, else the single trial's) whose verdict is 'slower'."""
    if comparison.empty:
        return comparison
    over_trials = comparison["trial"].isna()
    keys = ["phase", "pipeline", "metric"]
    aggregated = set(map(tuple, comparison.loc[over_trials, keys].to_numpy().tolist()))
    per_trial_only = ~over_trials & ~comparison[keys].apply(tuple, axis=1).isin(aggregated)
    headline = comparison[over_trials | per_trial_only]
    return headline[headline["verdict"] == "slower"]

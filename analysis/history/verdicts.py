"""Verdicts across runs: every run of a benchmark judged against the runs before it.

`history_connection()` reads the `run_history` view for one spec hash, judges each metric's
series per machine class with analysis.history.change_points (between-run spread, change points, the
minimal detectable change) and names the likely cause of each change with
analysis.history.attribution. It is what `collobench history` prints and what the Dagster
`regression` and `reproducibility` checks read (`run_verdicts()`: one run's verdicts, judged on the
history up to that run only).

Runs of one spec on different machine classes are never pooled: each class is its own history
(the `machine_class` column says which a row belongs to).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd

from analysis.history.attribution import calibration_shift, cause_of
from analysis.history.change_points import (
    IMPROVED,
    REGRESSED,
    UNDECIDED,
    RunJudgement,
    VerdictRule,
    judge_history,
)
from analysis.warehouse.reader import require_read_only
from stages.contracts.errors import InvalidInputError

JSON_KEYS = (
    "run_id",
    "metric",
    "value",
    "verdict",
    "change_pct",
    "change_ci95",
    "cause",
    "mde_pct",
)
"""The keys every row of `collobench history --format json` has (a contract)."""
COLUMNS = [
    "machine_class",
    "run_seq",
    "run_id",
    "started_at",
    "trial",
    "phase",
    "pipeline",
    "metric",
    "value",
    "ci95_low",
    "ci95_high",
    "verdict",
    "change_pct",
    "change_ci95",
    "cause",
    "mde_pct",
    "change_point",
    "detail",
    "calibration_score",
    "host",
    "git_commit",
    "commit_before",
    "commit_after",
]
"""`commit_before` / `commit_after`: for a change (regressed, improved), the git commit of the run
before its change point and of the first run after it, when both runs recorded one: what
`collobench ab --repo` and `collobench bisect` would confirm and locate it between."""
SERIES_KEYS = ["machine_class", "trial", "phase", "pipeline", "metric"]
DEFAULT_RULE = VerdictRule()


class UnknownSpec(InvalidInputError, LookupError):
    """No run of the spec (name or hash) is in the warehouse."""


def resolve_spec_hash(connection: duckdb.DuckDBPyConnection, reference: str) -> str:
    """The spec hash `reference` names: a full hash, a hash prefix (8+ characters) or a spec
    name with runs in the warehouse; UnknownSpec (one line) otherwise or when ambiguous."""
    found = connection.execute(
        "SELECT DISTINCT spec_hash FROM runs WHERE spec_hash IS NOT NULL AND "
        "(spec_hash = $ref OR (length($ref) >= 8 AND starts_with(spec_hash, $ref)) "
        "OR name = $ref)",
        {"ref": reference},
    ).fetchall()
    hashes = sorted(str(row[0]) for row in found)
    if not hashes:
        raise UnknownSpec(f"no run of spec {reference!r} is in the warehouse")
    if len(hashes) > 1:
        shown = ", ".join(h[:12] for h in hashes)
        raise UnknownSpec(
            f"spec {reference!r} names {len(hashes)} spec hashes ({shown}): give the spec file "
            "or a hash"
        )
    return hashes[0]


def history_connection(
    connection: duckdb.DuckDBPyConnection,
    spec_hash: str,
    pipeline: str | None = None,
    metric: str | None = None,
    until_run: str | None = None,
    rule: VerdictRule = DEFAULT_RULE,
) -> pd.DataFrame:
    """Every run of `spec_hash` (up to `until_run` when given), each metric judged against the
    runs before it (COLUMNS). Filtering by pipeline or metric happens after judging: the family
    a run's false-alarm rate covers is all of its metrics either way."""
    require_read_only(connection)
    rows = connection.execute(
        "SELECT * FROM run_history WHERE spec_hash = ? ORDER BY machine_class, trial, phase, "
        "pipeline, metric_order, run_seq",
        [spec_hash],
    ).df()
    if until_run is not None:
        rows = _up_to(rows, until_run)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    metrics = int(rows.groupby(["machine_class", "run_id"]).size().max())
    judged = pd.concat(
        [
            _judged_series(series, metrics, rule)
            for _, series in rows.groupby(SERIES_KEYS, sort=False)
        ]
    )
    if pipeline is not None:
        judged = judged[judged["pipeline"] == pipeline]
    if metric is not None:
        judged = judged[judged["metric"] == metric]
    return judged[COLUMNS].reset_index(drop=True)


def run_verdicts(
    connection: duckdb.DuckDBPyConnection, run_id: str, rule: VerdictRule = DEFAULT_RULE
) -> pd.DataFrame:
    """One run's verdicts, judged on its spec's history up to that run (COLUMNS; empty when the
    run is not a completed run in the warehouse)."""
    found = connection.execute("SELECT spec_hash FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if found is None or found[0] is None:
        return pd.DataFrame(columns=COLUMNS)
    history = history_connection(connection, str(found[0]), until_run=run_id, rule=rule)
    return history[history["run_id"] == run_id].reset_index(drop=True)


def _up_to(rows: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The rows of runs that started no later than `run_id` (ties broken by run id)."""
    own = rows[rows["run_id"] == run_id]
    if own.empty:
        return rows.iloc[0:0]
    started = own["started_at"].iloc[0]
    keep = (rows["started_at"] < started) | (
        (rows["started_at"] == started) & (rows["run_id"] <= run_id)
    )
    return rows[keep]


def _judged_series(series: pd.DataFrame, metrics: int, rule: VerdictRule) -> pd.DataFrame:
    """One metric's series with each run's verdict, its cause and the change points."""
    series = series.sort_values("run_seq").reset_index(drop=True)
    judgements = judge_history(
        series["value"].tolist(), bool(series["higher_is_better"].iloc[0]), metrics, rule
    )
    records = series.to_dict("records")
    calibration = series["calibration_score"].tolist()
    regime_starts = _regime_starts(judgements)
    out = series.copy()
    out["verdict"] = [j.verdict for j in judgements]
    out["change_pct"] = [j.change_pct for j in judgements]
    out["change_ci95"] = [list(j.change_ci95) if j.change_ci95 else None for j in judgements]
    out["mde_pct"] = [j.mde_pct for j in judgements]
    out["detail"] = [_detail(j, records) for j in judgements]
    out["cause"] = [
        _cause(index, j, records, calibration, regime_starts[index])
        for index, j in enumerate(judgements)
    ]
    points = {j.change_point_index for j in judgements if j.change_point_index is not None}
    out["change_point"] = [index in points for index in range(len(out))]
    commits = [_change_commits(j, records) for j in judgements]
    out["commit_before"] = [before for before, _ in commits]
    out["commit_after"] = [after for _, after in commits]
    return out


def _change_commits(
    judgement: RunJudgement, records: list[dict[str, Any]]
) -> tuple[str | None, str | None]:
    """The commits of the runs either side of a change's point; (None, None) for no change."""
    point = judgement.change_point_index
    if judgement.verdict not in (REGRESSED, IMPROVED) or point is None or point == 0:
        return None, None
    return _text(records[point - 1].get("git_commit")), _text(records[point].get("git_commit"))


def _text(value: Any) -> str | None:
    return None if value is None or pd.isna(value) else str(value)


def _regime_starts(judgements: Sequence[RunJudgement]) -> list[int]:
    """For each run, where its regime started when it was judged (the last change point found
    before it)."""
    starts, current = [], 0
    for judgement in judgements:
        starts.append(current)
        if judgement.change_point_index is not None:
            current = judgement.change_point_index
    return starts


def _cause(
    index: int,
    judgement: RunJudgement,
    records: list[dict[str, Any]],
    calibration: list[Any],
    regime_start: int,
) -> str | None:
    """The likely cause of a change (or of a run off its band); None for a run in its band."""
    changed = judgement.verdict in (REGRESSED, IMPROVED)
    off_band = judgement.verdict == UNDECIDED and judgement.change_pct is not None
    if not (changed or off_band):
        return None
    point = judgement.change_point_index if changed else index
    assert point is not None
    if point == 0:
        return None
    shift = calibration_shift(
        [_number(x) for x in calibration[regime_start:point]],
        [_number(x) for x in calibration[point : index + 1]],
    )
    return cause_of(records[point - 1], records[point], shift)


def _detail(judgement: RunJudgement, records: list[dict[str, Any]]) -> str:
    """The judgement's sentence, naming the run a change started at by its id."""
    point = judgement.change_point_index
    if point is None:
        return judgement.detail
    return judgement.detail.replace(
        f"run {point + 1} of the history", str(records[point]["run_id"])
    )


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)

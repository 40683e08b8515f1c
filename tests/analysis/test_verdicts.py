"""Verdicts across runs on a real warehouse: the `run_history` view, the judged history of a
spec (analysis.history.verdicts), attribution to code, environment or machine, machine classes kept
apart, and `collobench history`. The runs are built with known figures (tests/analysis/rundirs)
so each verdict and cause is decided by construction."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from analysis.history.verdicts import JSON_KEYS, history_connection, run_verdicts
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from stages.cli.app import app
from tests.analysis.rundirs import SECOND_NS, RunBuilder, rows_of

runner = CliRunner()
SPEC = "a" * 64
QUERIES = 200
COMMIT_A, COMMIT_B = "1" * 40, "2" * 40


@dataclass
class HistoryRun(RunBuilder):
    """A run of spec SPEC whose manifest records a chosen environment."""

    environment: dict[str, Any] = field(default_factory=dict)
    host: str = "box-1"

    def manifest(self) -> dict[str, Any]:
        return {
            **super().manifest(),
            "spec_hash": SPEC,
            "name": "hist",
            "host": self.host,
            "environment": self.environment,
        }


def environment(
    commit: str = COMMIT_A, torch: str = "2.14.1", cpu: str = "Test CPU", dirty: bool = False
) -> dict[str, Any]:
    return {
        "hostname": "box-1",
        "git": {"commit": commit, "dirty": dirty, "branch": "main"},
        "packages": {"collobench": "0.1.0", "torch": torch, "transformers": "4.57.0"},
        "packages_sha256": "f" * 64 if torch == "2.14.1" else "e" * 64,
        "python": {"version": "3.11.7"},
        "cpu": {"model": cpu, "logical_cores": 2},
        "memory_total_bytes": 24 * 2**30,
        "gpus": [],
    }


def history_run(
    root: Path,
    index: int,
    latency_ms: float,
    env: dict[str, Any] | None = None,
    calibration: float | None = 1000.0,
    status: str = "ok",
) -> Path:
    """Run `index` of the history: pipeline `p`, solo, QUERIES queries each latency_ms long."""
    run = HistoryRun(
        root,
        f"2026010{index // 10}-{index % 10:02d}0000-hist",
        {"p": "server"},
        started_at=f"2026-01-01T{index:02d}:00:00+00:00",
        status=status,
        environment=env or environment(),
    )
    window_ns = int(QUERIES * latency_ms * 1e6)
    run.uniform_queries(0, "solo", "p", QUERIES, window_ns, 100 * SECOND_NS)
    if calibration is not None:
        for position in ("before", "after"):
            run.add(
                "calibration", 0, "solo", "p", position=position, workload="cpu_loop",
                score=calibration, unit="kloops_per_s", start_ns=0, end_ns=1,
            )  # fmt: skip
    return run.write()


# Between-run wobble of a quiet history (sd 2.5%), fixed so every verdict below is decided by
# construction, not by a random draw.
WOBBLE = (0.02, -0.03, 0.01, 0.035, -0.02, 0.0, -0.025, 0.015, 0.03, -0.01, 0.005)


def noisy(count: int, start: int = 0) -> list[float]:
    """`count` latencies around 10 ms with the WOBBLE between-run spread."""
    return [10.0 * math.exp(WOBBLE[(start + i) % len(WOBBLE)]) for i in range(count)]


def judged(db_path: Path, metric: str = "latency_p50_ms", **filters: Any) -> Any:
    connection = connect_read_only(db_path)
    try:
        frame = history_connection(connection, SPEC, metric=metric, **filters)
    finally:
        connection.close()
    return frame


def test_run_history_has_one_row_per_run_and_metric_in_time_order(
    tmp_path: Path, db_path: Path
) -> None:
    dirs = [history_run(tmp_path, i, 10.0 + i, calibration=900.0 + i) for i in range(3)]
    dirs.append(history_run(tmp_path, 3, 99.0, status="failed"))  # not a figure of the spec
    load_runs(dirs, db_path)
    rows = rows_of(
        db_path,
        "SELECT run_seq, metric, value, calibration_score, git_commit, torch_version, "
        "packages_sha256, machine_class, host FROM run_history ORDER BY metric, run_seq",
    )
    latency = [r for r in rows if r["metric"] == "latency_p50_ms"]
    assert [r["run_seq"] for r in latency] == [1, 2, 3]
    assert [r["value"] for r in latency] == pytest.approx([10.0, 11.0, 12.0])
    assert [r["calibration_score"] for r in latency] == pytest.approx([900.0, 901.0, 902.0])
    assert {r["metric"] for r in rows} == {"queries_per_s", "latency_p50_ms", "latency_p99_ms"}
    first = latency[0]
    assert first["git_commit"] == COMMIT_A and first["torch_version"] == "2.14.1"
    assert first["packages_sha256"] == "f" * 64 and first["host"] == "box-1"
    assert first["machine_class"] == "Test CPU / 2 cores / 24 GiB / no GPU"


def test_a_short_history_is_undecided_and_says_what_it_needs(tmp_path: Path, db_path: Path) -> None:
    load_runs([history_run(tmp_path, i, v) for i, v in enumerate(noisy(3))], db_path)
    frame = judged(db_path)
    assert set(frame["verdict"]) == {"undecided"}
    assert "3 run(s) in the history; a verdict needs 8" in frame["detail"].iloc[-1]


def _history_with_step(
    root: Path, after_env: dict[str, Any], after_calibration: float = 1000.0
) -> list[Path]:
    """Eight runs near 10 ms, then three 30% slower with another environment or machine."""
    before = [history_run(root, i, v) for i, v in enumerate(noisy(8))]
    after = [
        history_run(root, 8 + i, 13.0 * v / 10.0, after_env, after_calibration)
        for i, v in enumerate(noisy(3, start=5))
    ]
    return before + after


def test_a_code_change_is_found_and_attributed_to_the_commit(tmp_path: Path, db_path: Path) -> None:
    load_runs(_history_with_step(tmp_path, environment(commit=COMMIT_B)), db_path)
    frame = judged(db_path)
    flagged = frame[frame["verdict"] == "regressed"]
    assert len(flagged) == 1  # flagged once, when the shift is decided
    change = flagged.iloc[0]
    assert change["change_pct"] == pytest.approx(30.0, abs=5.0)
    low, high = change["change_ci95"]
    assert low < change["change_pct"] < high
    assert change["cause"] == f"code: commit {COMMIT_A[:12]} -> {COMMIT_B[:12]}"
    assert frame["change_point"].tolist().index(True) == 8  # the first slower run
    assert frame.iloc[8]["verdict"] == "undecided"  # one run off the band decides nothing
    assert "2 more runs decide" in frame.iloc[8]["detail"]
    # Its throughput did not change (the same 200 queries over a longer window is lower:
    # judged on its own history, with its own verdict).
    assert (
        judged(db_path, metric="queries_per_s")["verdict"]
        .iloc[:8]
        .isin(["undecided", "no change"])
        .all()
    )


def test_a_package_change_is_attributed_to_the_environment(tmp_path: Path, db_path: Path) -> None:
    load_runs(_history_with_step(tmp_path, environment(torch="2.15.0")), db_path)
    change = judged(db_path).query("verdict == 'regressed'").iloc[0]
    assert change["cause"] == "environment: torch 2.14.1 -> 2.15.0"


def test_a_slower_machine_is_attributed_to_the_calibration(tmp_path: Path, db_path: Path) -> None:
    load_runs(_history_with_step(tmp_path, environment(), after_calibration=700.0), db_path)
    change = judged(db_path).query("verdict == 'regressed'").iloc[0]
    assert change["cause"].startswith("machine: calibration score -30%")


def test_a_change_nothing_recorded_explains_is_unexplained(tmp_path: Path, db_path: Path) -> None:
    load_runs(_history_with_step(tmp_path, environment()), db_path)
    assert judged(db_path).query("verdict == 'regressed'").iloc[0]["cause"] == "unexplained"


def test_runs_of_another_machine_class_are_a_history_of_their_own(
    tmp_path: Path, db_path: Path
) -> None:
    dirs = [history_run(tmp_path, i, v) for i, v in enumerate(noisy(9))]
    # Two runs on a machine of another class, three times slower: not a regression of the
    # first class's history, and too short a history to judge on their own.
    other = environment(cpu="Other CPU")
    dirs += [history_run(tmp_path, 9 + i, 30.0, other) for i in range(2)]
    load_runs(dirs, db_path)
    frame = judged(db_path)
    assert frame["machine_class"].nunique() == 2
    assert not (frame["verdict"] == "regressed").any()
    others = frame[frame["machine_class"].str.startswith("Other CPU")]
    assert list(others["verdict"]) == ["undecided", "undecided"]


def test_a_run_is_judged_on_the_history_up_to_it(tmp_path: Path, db_path: Path) -> None:
    dirs = _history_with_step(tmp_path, environment(commit=COMMIT_B))
    load_runs(dirs, db_path)
    connection = connect_read_only(db_path)
    try:
        ninth = run_verdicts(connection, dirs[8].name)
        last = run_verdicts(connection, dirs[-1].name)
    finally:
        connection.close()
    p50 = ninth[ninth["metric"] == "latency_p50_ms"].iloc[0]
    assert p50["verdict"] == "undecided"  # the runs after it do not exist yet for it
    assert set(last["metric"]) == {"queries_per_s", "latency_p50_ms", "latency_p99_ms"}


@pytest.mark.slow
def test_collobench_history_prints_json_and_writes_the_plot(tmp_path: Path, db_path: Path) -> None:
    load_runs(_history_with_step(tmp_path, environment(commit=COMMIT_B)), db_path)
    plot = tmp_path / "history.png"
    shown = runner.invoke(
        app,
        [
            *("history", "hist", "--db", str(db_path), "--format", "json"),
            *("--pipeline", "p", "--metric", "latency_p50_ms", "--plot", str(plot)),
        ],
    )
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.output)
    assert len(rows) == 11
    assert all(list(row)[: len(JSON_KEYS)] == list(JSON_KEYS) for row in rows)
    assert [row["verdict"] for row in rows].count("regressed") == 1
    assert plot.read_bytes().startswith(b"\x89PNG")
    table = runner.invoke(app, ["history", SPEC[:12], "--db", str(db_path), "--plot", str(plot)])
    assert table.exit_code == 0, table.output
    assert "regressed" in table.output and "code: commit" in table.output


def test_collobench_history_refuses_an_unknown_spec(tmp_path: Path, db_path: Path) -> None:
    load_runs([history_run(tmp_path, 0, 10.0)], db_path)
    result = runner.invoke(app, ["history", "nope", "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.output.strip() == f"{db_path}: no run of spec 'nope' is in the warehouse"

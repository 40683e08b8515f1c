"""`compare_runs` / `collobench compare`: run B against run A, with hand-computed ratios,
intervals and verdicts (faster, slower, no measurable change), and refusals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.history.compare import SpecMismatch, UnknownRun, compare_runs, regressions
from analysis.warehouse.loader import load_runs
from stages.cli.app import app
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder

runner = CliRunner()
T975_9 = 2.2622  # Student t(0.975, 9): batch means, 10 batches
T975_2 = 4.3027  # t(0.975, 2): three trials


@dataclass
class HashedRun(RunBuilder):
    """A RunBuilder whose manifest carries a chosen spec hash."""

    spec_hash: str = "0" * 64

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "spec_hash": self.spec_hash}


def uniform_run(
    root: Path, run_id: str, count: int, window_s: float, trials: int = 1, spec: str = "0" * 64
) -> HashedRun:
    """Pipeline `p`, solo: `count` ok queries over `window_s` per trial, every latency
    window_s / count (so every batch-means standard error is 0)."""
    run = HashedRun(root, run_id, {"p": "server"}, spec_hash=spec)
    for trial in range(trials):
        run.uniform_queries(
            trial, "solo", "p", count, int(window_s * SECOND_NS), trial * 100 * SECOND_NS
        )
    return run


def row(frame: pd.DataFrame, metric: str, trial: int | None = 0) -> dict[str, Any]:
    chosen = frame[(frame["metric"] == metric) & (frame["phase"] == "solo")]
    chosen = chosen[chosen["trial"].isna()] if trial is None else chosen[chosen["trial"] == trial]
    assert len(chosen) == 1, chosen
    return dict(chosen.iloc[0])


def compared(tmp_path: Path, db_path: Path, a: RunBuilder, b: RunBuilder) -> pd.DataFrame:
    load_runs([a.write(), b.write()], db_path)
    return compare_runs(db_path, a.run_id, b.run_id)


def test_slower_run(tmp_path: Path, db_path: Path) -> None:
    """B completes half the queries in the same window: 0.5x throughput, 2x latency."""
    frame = compared(
        tmp_path, db_path, uniform_run(tmp_path, "a", 1000, 10), uniform_run(tmp_path, "b", 500, 10)
    )
    qps = row(frame, "queries_per_s")
    assert (qps["a_value"], qps["b_value"]) == pytest.approx((100.0, 50.0))
    assert (qps["ratio"], qps["ratio_ci_low"], qps["ratio_ci_high"]) == pytest.approx((0.5,) * 3)
    assert (qps["verdict"], qps["ci_method"]) == ("slower", "batch_means_delta")
    p50 = row(frame, "latency_p50_ms")
    assert (p50["a_value"], p50["b_value"], p50["ratio"]) == pytest.approx((10.0, 20.0, 2.0))
    assert p50["verdict"] == "slower"  # for latency, higher is slower
    # B's batches hold 50 queries, too few for a p99 (100 needed): no interval, no verdict.
    p99 = row(frame, "latency_p99_ms")
    assert p99["ratio"] == pytest.approx(2.0)
    assert pd.isna(p99["verdict"]) and pd.isna(p99["ci_method"])
    assert set(frame["trial"]) == {0}  # one trial: no row over the trials
    assert list(regressions(frame)["metric"]) == ["queries_per_s", "latency_p50_ms"]


def test_faster_run(tmp_path: Path, db_path: Path) -> None:
    frame = compared(
        tmp_path, db_path, uniform_run(tmp_path, "a", 500, 10), uniform_run(tmp_path, "b", 1000, 10)
    )
    assert row(frame, "queries_per_s")["ratio"] == pytest.approx(2.0)
    assert row(frame, "queries_per_s")["verdict"] == "faster"
    assert row(frame, "latency_p50_ms")["ratio"] == pytest.approx(0.5)
    assert row(frame, "latency_p50_ms")["verdict"] == "faster"
    assert regressions(frame).empty


def test_no_measurable_change_inside_the_one_percent_band(tmp_path: Path, db_path: Path) -> None:
    """A 0.5% change with a zero-width interval is inside ci_verdict's +-1% band."""
    frame = compared(
        tmp_path,
        db_path,
        uniform_run(tmp_path, "a", 1000, 10),
        uniform_run(tmp_path, "b", 1000, 10.05),
    )
    p50 = row(frame, "latency_p50_ms")
    assert p50["ratio"] == pytest.approx(1.005)
    assert p50["ratio_ci_low"] == pytest.approx(1.005)
    assert p50["verdict"] == "no measurable change"
    assert row(frame, "queries_per_s")["ratio"] == pytest.approx(1 / 1.005)
    assert row(frame, "queries_per_s")["verdict"] == "no measurable change"
    assert row(frame, "latency_p99_ms")["verdict"] == "no measurable change"


def alternating_run(root: Path, run_id: str) -> HashedRun:
    """1000 ok queries 10 ms apart; latency 10 ms in the even batches of 100 (scheduled order),
    12 ms in the odd ones. p50 = sorted[500] = 12 ms; batch p50s alternate 10, 12, so the
    batch-means standard error is sd / sqrt(10) = sqrt(10 / 9) / sqrt(10) = 1/3 ms."""
    run = HashedRun(root, run_id, {"p": "server"})
    for index in range(1000):
        scheduled = index * 10 * MS_NS
        took = (10 if (index // 100) % 2 == 0 else 12) * MS_NS
        run.add(
            "queries",
            0,
            "solo",
            "p",
            query_id=index,
            scheduled_ns=scheduled,
            issued_ns=scheduled,
            completed_ns=scheduled + took,
            status="ok",
            samples=1,
            warmup=False,
        )
    return run


@pytest.mark.parametrize(
    ("b_latency_ms", "verdict"), [(12.6, "no measurable change"), (13.2, "slower")]
)
def test_latency_interval_decides_the_verdict(
    tmp_path: Path, db_path: Path, b_latency_ms: float, verdict: str
) -> None:
    """A's p50 has se 1/3 ms, B's 0: log(B / A) +- t(0.975, 9) * (1/3) / 12 (Welch df = 9).
    5% slower spans 1; 10% slower does not."""
    b = uniform_run(tmp_path, "b", 1000, b_latency_ms)
    frame = compared(tmp_path, db_path, alternating_run(tmp_path, "a"), b)
    p50 = row(frame, "latency_p50_ms")
    ratio = b_latency_ms / 12
    half = T975_9 * (1 / 3) / 12
    assert p50["a_value"] == pytest.approx(12.0)
    assert p50["ratio"] == pytest.approx(ratio)
    assert p50["ratio_ci_low"] == pytest.approx(ratio * math.exp(-half))
    assert p50["ratio_ci_high"] == pytest.approx(ratio * math.exp(half))
    assert p50["verdict"] == verdict


def test_over_trials_geometric_mean_with_t_interval(tmp_path: Path, db_path: Path) -> None:
    """Three trials, B's p50 2.0, 2.2 and 1.8 times A's: trial i paired with trial i, then
    exp(mean(log r) +- t(0.975, 2) * sd(log r) / sqrt(3))."""
    a = uniform_run(tmp_path, "a", 1000, 10, trials=3)
    b = HashedRun(tmp_path, "b", {"p": "server"})
    for trial, window_s in enumerate((10, 11, 9)):  # 500 queries: 20, 22, 18 ms
        b.uniform_queries(trial, "solo", "p", 500, window_s * SECOND_NS, trial * 100 * SECOND_NS)
    frame = compared(tmp_path, db_path, a, b)
    per_trial = frame[(frame["metric"] == "latency_p50_ms") & frame["trial"].notna()]
    assert per_trial["ratio"].tolist() == pytest.approx([2.0, 2.2, 1.8])
    assert set(per_trial["ci_method"]) == {"batch_means_delta"}
    logs = [math.log(value) for value in (2.0, 2.2, 1.8)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    over = row(frame, "latency_p50_ms", trial=None)
    assert over["trials"] == 3
    assert over["ratio"] == pytest.approx(math.exp(mean))
    assert over["ratio_ci_low"] == pytest.approx(math.exp(mean - T975_2 * sd / math.sqrt(3)))
    assert over["ratio_ci_high"] == pytest.approx(math.exp(mean + T975_2 * sd / math.sqrt(3)))
    assert (over["ci_method"], over["verdict"]) == ("log_t_over_trials", "slower")
    assert over["b_value"] == pytest.approx(20.0)  # mean of 20, 22, 18
    # The regression check reads the row over the trials, not the per-trial ones.
    assert regressions(frame)["trial"].isna().all()


def test_failures_make_an_infinite_p99_slower(tmp_path: Path, db_path: Path) -> None:
    """B drops 20 of 1020 measured queries (> 1%): its p99 is +inf, the ratio 'inf', slower
    without an interval; its p50 (sorted[510] = 10 ms) is unchanged."""
    b = uniform_run(tmp_path, "b", 1000, 10)
    for offset in range(20):
        b.add(
            "queries",
            0,
            "solo",
            "p",
            query_id=9000 + offset,
            scheduled_ns=5 * SECOND_NS + offset,
            issued_ns=5 * SECOND_NS + offset,
            completed_ns=None,
            status="dropped",
            samples=1,
            warmup=False,
        )
    frame = compared(tmp_path, db_path, uniform_run(tmp_path, "a", 1000, 10), b)
    p99 = row(frame, "latency_p99_ms")
    assert math.isinf(p99["ratio"]) and p99["verdict"] == "slower"
    assert (p99["a_failed_queries"], p99["b_failed_queries"]) == (0, 20)
    assert row(frame, "latency_p50_ms")["verdict"] == "no measurable change"
    # Reversed, only A is infinite: B is faster.
    back = compare_runs(db_path, "b", "a")
    assert row(back, "latency_p99_ms")["ratio"] == 0.0
    assert row(back, "latency_p99_ms")["verdict"] == "faster"


def test_different_specs_are_refused_unless_allowed(tmp_path: Path, db_path: Path) -> None:
    a = uniform_run(tmp_path, "a", 1000, 10, spec="a" * 64)
    b = uniform_run(tmp_path, "b", 500, 10, spec="b" * 64)
    load_runs([a.write(), b.write()], db_path)
    with pytest.raises(SpecMismatch, match="different specs"):
        compare_runs(db_path, "a", "b")
    allowed = compare_runs(db_path, "a", "b", allow_different_specs=True)
    assert row(allowed, "queries_per_s")["verdict"] == "slower"

    refused = runner.invoke(app, ["compare", "a", "b", "--db", str(db_path)])
    assert refused.exit_code == 2
    assert len(refused.output.strip().splitlines()) == 1
    assert "--allow-different-specs" in refused.output
    shown = runner.invoke(
        app, ["compare", "a", "b", "--db", str(db_path), "--allow-different-specs"]
    )
    assert shown.exit_code == 0, shown.output
    assert "slower" in shown.output and "0.5 [0.5, 0.5]" in shown.output
    # The intervals are one run's: the output says so and points to the verdict across runs.
    assert "within-run only" in shown.output
    assert "collobench history " in shown.output


def test_unknown_run_is_one_line_exit_2(tmp_path: Path, db_path: Path) -> None:
    load_runs([uniform_run(tmp_path, "a", 1000, 10).write()], db_path)
    with pytest.raises(UnknownRun, match="'nope'"):
        compare_runs(db_path, "a", "nope")
    result = runner.invoke(app, ["compare", "nope", "a", "--db", str(db_path)])
    assert result.exit_code == 2
    assert result.output.strip() == f"{db_path}: no run 'nope' loaded"
    missing = runner.invoke(app, ["compare", "a", "b", "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code == 2 and len(missing.output.strip().splitlines()) == 1


def test_cli_table_over_trials(tmp_path: Path, db_path: Path) -> None:
    a = uniform_run(tmp_path, "a", 1000, 10, trials=2)
    b = uniform_run(tmp_path, "b", 1000, 10, trials=2)
    load_runs([a.write(), b.write()], db_path)
    result = runner.invoke(app, ["compare", "a", "b", "--db", str(db_path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "no measurable change" in result.output
    assert "log_t_over_trials" in result.output and "│ all " in result.output

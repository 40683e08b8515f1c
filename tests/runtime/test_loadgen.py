"""The load generator: arrival processes, scenarios, end conditions, honest latency."""

from __future__ import annotations

import itertools
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from stages.runtime.driver import arrival_seed, run_pipeline
from stages.runtime.loadgen.arrivals import PoissonArrivals
from stages.runtime.loadgen.timing import set_timer_slack_ns, timer_slack_ns
from stages.runtime.loadgen.trace_formats import TraceError, read_trace
from stages.spec.loadgen import ServerLoadgen
from stages.spec.models import PipelineSpec
from tests.helpers import rows


def spec(stages: list[dict[str, Any]] | None = None, **loadgen: Any) -> PipelineSpec:
    loadgen.setdefault("timeout_s", 20)
    return PipelineSpec.model_validate(
        {"name": "p", "loadgen": loadgen, "stages": stages or [{"id": "s", "type": "noop"}]}
    )


def queries(recorder: Any) -> list[dict[str, Any]]:
    return sorted(rows(recorder, "queries"), key=lambda q: q["query_id"])


def gaps_s(loadgen: ServerLoadgen, count: int, seed: int = 1) -> list[float]:
    schedule = PoissonArrivals(loadgen).schedule(random.Random(seed))
    offsets = [offset for offset, _ in itertools.islice(schedule, count)]
    return [(b - a) / 1e9 for a, b in itertools.pairwise([0, *offsets])]


def test_poisson_gaps_are_exponential_at_the_rate() -> None:
    gaps = gaps_s(ServerLoadgen(type="server", rate=200), 5000)
    result = stats.kstest(gaps, "expon", args=(0, 1 / 200))
    assert result.pvalue > 0.01
    assert statistics.mean(gaps) == pytest.approx(1 / 200, rel=0.05)
    # ...and the test can tell a wrong rate apart.
    assert stats.kstest(gaps, "expon", args=(0, 1 / 150)).pvalue < 0.01


def test_burstiness_sets_the_coefficient_of_variation() -> None:
    for shape, expected_cv in ((4, 0.5), (1, 1.0), (0.25, 2.0)):
        gaps = gaps_s(ServerLoadgen(type="server", rate=100, burstiness=shape), 20000)
        cv = statistics.pstdev(gaps) / statistics.mean(gaps)
        assert cv == pytest.approx(expected_cv, rel=0.08), shape
        assert statistics.mean(gaps) == pytest.approx(1 / 100, rel=0.05)


@pytest.mark.slow
def test_poisson_run_issues_the_schedule_and_reruns_are_identical() -> None:
    pipeline = spec(type="server", rate=500, duration_s=1)
    offsets = []
    for _ in range(2):
        result, recorder = run_pipeline(pipeline, seed=3)
        assert result.status == "ok"
        rows_ = queries(recorder)
        start = result.outcome.start_ns
        offsets.append([q["scheduled_ns"] - start for q in rows_])
    assert offsets[0] == offsets[1]
    assert 400 < len(offsets[0]) < 600
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise([0, *offsets[0]])]
    assert stats.kstest(gaps, "expon", args=(0, 1 / 500)).pvalue > 0.001
    other, recorder = run_pipeline(pipeline, seed=4)
    other_offsets = [q["scheduled_ns"] - other.outcome.start_ns for q in queries(recorder)]
    assert other_offsets[:50] != offsets[0][:50]  # another seed draws another schedule
    assert arrival_seed(3, "p", 0) != arrival_seed(3, "p", 1)  # and so does another trial


def test_issue_delay_is_recorded_and_small() -> None:
    _, recorder = run_pipeline(spec(type="constant", rate=1000, duration_s=1))
    delays_us = sorted((q["issued_ns"] - q["scheduled_ns"]) / 1e3 for q in queries(recorder))
    assert len(delays_us) == 1000
    # Generous bound for a shared CI machine; perf/loadgen_accuracy.py measures the real figure.
    assert delays_us[len(delays_us) // 2] < 1000


def test_timer_slack_is_set_per_thread() -> None:
    seen: dict[str, int | None] = {}

    def issuer() -> None:
        assert set_timer_slack_ns(1000)
        seen["before"] = timer_slack_ns()
        assert set_timer_slack_ns(1)
        seen["after"] = timer_slack_ns()

    thread = threading.Thread(target=issuer)
    thread.start()
    thread.join()
    assert seen == {"before": 1000, "after": 1}


def test_trace_replay_reproduces_offsets_and_sizes(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    offsets_ms = [0, 5, 5, 12.5, 40, 41, 90]
    trace.write_text(
        "offset_ms,samples\n" + "\n".join(f"{o},{i + 1}" for i, o in enumerate(offsets_ms))
    )
    result, recorder = run_pipeline(spec(type="trace", trace=str(trace), duration_s=10))
    assert result.outcome.stopped_by == "schedule_end"
    rows_ = queries(recorder)
    start = result.outcome.start_ns
    assert [q["scheduled_ns"] - start for q in rows_] == [round(o * 1e6) for o in offsets_ms]
    assert [q["samples"] for q in rows_] == list(range(1, 8))
    assert result.counters.samples_ok == sum(range(1, 8))


def test_trace_parquet_and_bad_traces(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"offset_ms": [0.0, 1.5, 3.0]}), path)
    assert [(r.offset_ns, r.samples, r.shape) for r in read_trace(path)] == [
        (0, 1, None),
        (1_500_000, 1, None),
        (3_000_000, 1, None),
    ]
    backwards = tmp_path / "back.csv"
    backwards.write_text("offset_ms\n5\n3\n")
    with pytest.raises(TraceError, match="row 2: offsets must be >= 0 and non-decreasing"):
        read_trace(backwards)
    with pytest.raises(TraceError, match="trace file not found"):
        read_trace(tmp_path / "missing.csv")


def test_overload_is_recorded_as_drops_not_hidden() -> None:
    slow = [{"id": "slow", "type": "sleep", "config": {"ms": 1}}]
    result, recorder = run_pipeline(
        spec(slow, type="server", rate=3000, duration_s=1, queue_depth=8)
    )
    rows_ = queries(recorder)
    statuses = {q["status"] for q in rows_}
    assert statuses == {"ok", "dropped"}
    dropped = [q for q in rows_ if q["status"] == "dropped"]
    assert len(dropped) > len(rows_) / 2  # capacity ~1000/s, offered 3000/s
    assert all(q["completed_ns"] is None for q in dropped)
    assert len(rows_) == result.outcome.issued  # every scheduled query has a row


def test_backlog_latency_grows_with_time() -> None:
    slow = [{"id": "slow", "type": "sleep", "config": {"ms": 1}}]
    result, recorder = run_pipeline(
        spec(slow, type="constant", rate=1500, duration_s=1, queue_depth=4, on_full="backlog")
    )
    rows_ = [q for q in queries(recorder) if q["status"] == "ok"]
    assert len(rows_) == result.outcome.issued
    latency_ms = [(q["completed_ns"] - q["scheduled_ns"]) / 1e6 for q in rows_]
    quarter = len(latency_ms) // 4
    early, late = statistics.median(latency_ms[:quarter]), statistics.median(latency_ms[-quarter:])
    assert late > 3 * early and late > 50  # measured from the schedule, the backlog shows
    delays_ms = [(q["issued_ns"] - q["scheduled_ns"]) / 1e6 for q in rows_]
    assert max(delays_ms) > 50  # late issues are visible as issue delay


def test_closed_loop_never_exceeds_concurrency() -> None:
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 2}}]
    result, recorder = run_pipeline(
        spec(stages, type="closed_loop", concurrency=3, duration_s=0.5, think_time_ms=1)
    )
    events = []
    for q in queries(recorder):
        events += [(q["issued_ns"], 1), (q["completed_ns"], -1)]
    outstanding = peak = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        outstanding += change
        peak = max(peak, outstanding)
    assert peak == 3
    rate = result.counters.ok / 0.5
    assert 200 < rate < 1000  # 3 clients, >= 3 ms per cycle: 1000/s is the ceiling


def test_single_stream_and_multi_stream() -> None:
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 1}}]
    _, recorder = run_pipeline(spec(stages, type="single_stream", duration_s=0.3))
    rows_ = queries(recorder)
    for previous, current in itertools.pairwise(rows_):
        assert current["scheduled_ns"] >= previous["completed_ns"]
    multi, recorder = run_pipeline(
        spec(
            stages,
            type="multi_stream",
            samples_per_query=8,
            max_queries=20,
            min_queries=20,
            duration_s=10,
        )
    )
    assert {q["samples"] for q in queries(recorder)} == {8}
    assert multi.counters.samples_ok == 160


def test_offline_issues_everything_at_once() -> None:
    result, recorder = run_pipeline(spec(type="offline", samples_per_query=5000))
    rows_ = queries(recorder)
    assert len(rows_) == 5000 and {q["status"] for q in rows_} == {"ok"}
    assert len({q["scheduled_ns"] for q in rows_}) == 1
    assert result.outcome.stopped_by == "all_issued"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loadgen", "reason", "check"),
    [
        (
            {"type": "constant", "rate": 1000, "duration_s": 10, "max_queries": 50},
            "max_queries",
            lambda n: n == 50,
        ),
        ({"type": "constant", "rate": 1000, "duration_s": 0.2}, "duration", lambda n: n == 200),
        (
            {"type": "constant", "rate": 100, "duration_s": 0.1, "min_queries": 30},
            "duration",
            lambda n: n == 30,
        ),
        (
            # min_queries keeps the window open, so the timeout (an offset of the schedule) ends it.
            {
                "type": "constant",
                "rate": 1000,
                "duration_s": 0.1,
                "min_queries": 10**6,
                "timeout_s": 0.3,
            },
            "timeout",
            lambda n: 250 <= n <= 300,
        ),
        (
            {"type": "closed_loop", "duration_s": 10, "max_queries": 40},
            "max_queries",
            lambda n: n == 40,
        ),
        (
            {"type": "closed_loop", "duration_s": 0.1, "min_queries": 10**6, "timeout_s": 0.3},
            "timeout",
            lambda n: n > 0,
        ),
    ],
    ids=["max_queries", "duration", "min_queries", "timeout", "closed_max", "closed_timeout"],
)
def test_end_conditions(loadgen: dict[str, Any], reason: str, check: Any) -> None:
    result, _ = run_pipeline(spec(**loadgen))
    assert result.outcome.stopped_by == reason
    assert check(result.outcome.issued), result.outcome.issued


def test_warmup_is_flagged() -> None:
    _, recorder = run_pipeline(
        spec(type="constant", rate=1000, duration_s=0.1, warmup_queries=10, warmup_s=0.02)
    )
    rows_ = queries(recorder)
    flagged = [q["query_id"] for q in rows_ if q["warmup"]]
    assert flagged == list(range(20))  # the first 10 by count, up to 20 ms by time
    assert len(rows_) == 120  # duration counts after the warm-up window


def measured(rows_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for q in rows_ if not q["warmup"]]


def test_backlog_timeout_records_every_due_arrival_as_not_issued() -> None:
    # 400 arrivals in the 1 s window; the pipeline takes ~190/s, so the backlogged issuer is
    # still in the first half of the schedule when real time reaches timeout_s.
    slow = [{"id": "slow", "type": "sleep", "config": {"ms": 5}}]
    result, recorder = run_pipeline(
        spec(
            slow,
            type="constant",
            rate=400,
            duration_s=1,
            queue_depth=4,
            on_full="backlog",
            timeout_s=1.2,
        )
    )
    outcome = result.outcome
    assert outcome.stopped_by == "timeout"
    rows_ = queries(recorder)
    assert [q["query_id"] for q in rows_] == list(range(400))  # every scheduled arrival
    missing = [q for q in rows_ if q["status"] == "not_issued"]
    assert len(missing) == outcome.not_issued > 100
    assert outcome.issued + outcome.not_issued == 400
    assert all(q["issued_ns"] is None and q["completed_ns"] is None for q in missing)
    issued = [q for q in rows_ if q["status"] != "not_issued"]
    assert max(q["query_id"] for q in issued) < min(q["query_id"] for q in missing)
    gap_ns = 2_500_000
    assert [q["scheduled_ns"] - outcome.start_ns for q in missing] == [
        q["query_id"] * gap_ns for q in missing
    ]


def test_closed_loop_clients_due_at_the_timeout_are_recorded() -> None:
    # Four clients, one 300 ms slot and a one-place queue: queries 0-2 get in by 300 ms, the
    # fourth client waits for room until timeout_s (0.5 s) and is still due then, and so is
    # the client whose query ended at 300 ms.
    slow = [{"id": "slow", "type": "sleep", "config": {"ms": 300}}]
    result, recorder = run_pipeline(
        spec(
            slow,
            type="closed_loop",
            concurrency=4,
            queue_depth=1,
            duration_s=0.1,
            min_queries=1000,
            timeout_s=0.5,
        )
    )
    outcome = result.outcome
    assert outcome.stopped_by == "timeout"
    rows_ = queries(recorder)
    missing = [q for q in rows_ if q["status"] == "not_issued"]
    assert (outcome.issued, outcome.not_issued, len(missing)) == (3, 2, 2)
    assert sorted(q["query_id"] for q in rows_) == list(range(5))
    for q in missing:
        assert q["issued_ns"] is None and q["completed_ns"] is None
        assert outcome.start_ns <= q["scheduled_ns"] <= outcome.start_ns + 0.5e9


def offline_throughput_qps(measured_queries: int, warmup_queries: int) -> float:
    # sleep, not busy: its cost does not depend on a per-run CPU calibration, so the two runs
    # compared do the same work per query.
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 0.5}}]
    _, recorder = run_pipeline(
        spec(
            stages,
            type="offline",
            samples_per_query=measured_queries + warmup_queries,
            warmup_queries=warmup_queries,
        )
    )
    ok = [q for q in measured(queries(recorder)) if q["status"] == "ok"]
    assert len(ok) == measured_queries
    window_ns = max(q["completed_ns"] for q in ok) - min(q["scheduled_ns"] for q in ok)
    return len(ok) / (window_ns / 1e9)


def test_offline_warmup_runs_before_the_measured_window() -> None:
    alone = offline_throughput_qps(800, 0)
    with_warmup = offline_throughput_qps(800, 800)  # half a run without warm-up before
    # A warm-up inside the window would halve the throughput (800 measured queries over the
    # time of 1,600). 30% still tells 1.0 from 0.5 and holds the two wall-clock runs' noise
    # on a loaded machine (0.83 under a load of 7 on 2 cores; the bound was 15%).
    assert with_warmup == pytest.approx(alone, rel=0.3), (alone, with_warmup)


def test_offline_measured_queries_are_scheduled_when_the_warmup_has_ended() -> None:
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 1}}]
    result, recorder = run_pipeline(
        spec(stages, type="offline", samples_per_query=60, warmup_queries=20)
    )
    rows_ = queries(recorder)
    warm = [q for q in rows_ if q["warmup"]]
    rest = measured(rows_)
    assert len(warm) == 20 and len(rest) == 40
    assert {q["scheduled_ns"] for q in warm} == {result.outcome.start_ns}
    assert len({q["scheduled_ns"] for q in rest}) == 1
    assert rest[0]["scheduled_ns"] >= max(q["completed_ns"] for q in warm)


def scheduled_span_s(rows_: list[dict[str, Any]]) -> float:
    times = [q["scheduled_ns"] for q in measured(rows_)]
    return (max(times) - min(times)) / 1e9


def test_warmup_queries_do_not_shorten_the_measured_duration() -> None:
    _, recorder = run_pipeline(spec(type="constant", rate=100, duration_s=1, warmup_queries=50))
    rows_ = queries(recorder)
    assert sum(q["warmup"] for q in rows_) == 50
    assert scheduled_span_s(rows_) >= 0.95


def test_closed_loop_warmup_does_not_shorten_the_measured_duration() -> None:
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 10}}]
    _, recorder = run_pipeline(
        spec(stages, type="single_stream", duration_s=0.5, warmup_queries=25)
    )
    rows_ = queries(recorder)
    assert sum(q["warmup"] for q in rows_) == 25
    assert scheduled_span_s(rows_) >= 0.4  # 0.5 s less the last cycles; 0.24 s before


def test_min_queries_counts_measured_queries() -> None:
    _, recorder = run_pipeline(
        spec(type="constant", rate=1000, duration_s=0.01, min_queries=30, warmup_queries=20)
    )
    rows_ = queries(recorder)
    assert len(measured(rows_)) == 30 and len(rows_) == 50


def test_offline_warmup_cut_by_the_timeout_leaves_the_measured_queries_not_issued() -> None:
    # The warm-up needs 10 x 50 ms, the timeout allows 0.3 s: the window never opens.
    stages = [{"id": "s", "type": "sleep", "config": {"ms": 50}}]
    result, recorder = run_pipeline(
        spec(
            stages,
            type="offline",
            samples_per_query=30,
            warmup_queries=10,
            duration_s=0,
            timeout_s=0.3,
        )
    )
    outcome = result.outcome
    assert outcome.stopped_by == "timeout"
    assert (outcome.issued, outcome.not_issued) == (10, 20)
    rows_ = queries(recorder)
    assert [q["query_id"] for q in rows_] == list(range(30))
    assert {q["status"] for q in rows_ if q["warmup"]} <= {"ok", "timeout"}
    rest = measured(rows_)
    assert {q["status"] for q in rest} == {"not_issued"}
    assert all(q["scheduled_ns"] >= outcome.start_ns + 0.3e9 for q in rest)


def test_error_budget_stop_records_the_arrivals_due_while_backlogged() -> None:
    # Every query fails after 20 ms; the budget is spent on the 5th, while the backlogged
    # issuer waits for room: the arrivals that fell due meanwhile are recorded.
    stages = [
        {"id": "wait", "type": "sleep", "config": {"ms": 20}, "outputs": ["bad"]},
        {"id": "bad", "type": "fail", "config": {"every": 1}},
    ]
    doc = {
        "name": "p",
        "error_budget": 5,
        "loadgen": {
            "type": "constant",
            "rate": 500,
            "duration_s": 1,
            "queue_depth": 1,
            "on_full": "backlog",
            "timeout_s": 20,
        },
        "stages": stages,
    }
    result, recorder = run_pipeline(PipelineSpec.model_validate(doc))
    outcome = result.outcome
    assert result.status == "failed" and outcome.stopped_by == "pipeline"
    rows_ = queries(recorder)
    assert outcome.not_issued == sum(q["status"] == "not_issued" for q in rows_) > 10
    assert [q["query_id"] for q in rows_] == list(range(outcome.issued + outcome.not_issued))


def test_backlogged_issuer_behind_a_hung_stage_stops_at_the_timeout() -> None:
    # Query 3 hangs with the entry queue full: the issuer waits for room only until timeout_s,
    # then every arrival of the window that was due is recorded.
    stages = [{"id": "stuck", "type": "fail", "config": {"at_query": 3, "mode": "hang"}}]
    started = time.monotonic()
    result, recorder = run_pipeline(
        spec(
            stages,
            type="constant",
            rate=200,
            duration_s=1,
            queue_depth=2,
            on_full="backlog",
            timeout_s=1.5,
        )
    )
    assert time.monotonic() - started < 5
    outcome = result.outcome
    assert result.status == "timeout" and outcome.stopped_by == "timeout"
    rows_ = queries(recorder)
    assert [q["query_id"] for q in rows_] == list(range(200))
    statuses = [q["status"] for q in rows_]
    assert statuses[:3] == ["ok"] * 3 and statuses[3] == "timeout"
    assert statuses.count("not_issued") == outcome.not_issued == 200 - outcome.issued


def test_the_wait_out_after_a_wake_up_is_bounded_by_50_us() -> None:
    """The issuer sleeps until `margin_ns` before an arrival and waits out what is left; on a
    machine whose wake-ups are very late the learned margin must still not exceed 50 us."""
    from stages.runtime.loadgen.timing import SPIN_LIMIT_NS, ArrivalClock

    clock = ArrivalClock()
    for _ in range(256):
        clock._learn(400_000)  # 400 us late wake-ups
    assert SPIN_LIMIT_NS == 50_000
    assert clock.margin_ns == SPIN_LIMIT_NS


def test_the_margin_makes_nine_wake_ups_in_ten_early() -> None:
    """The issuer sleeps until the margin before an arrival: with the margin at the median
    wake-up latency half the wake-ups were late and the issue delay's p50 sat on the edge
    between on-time and late queries; at the 90th percentile nine in ten wake early."""
    from stages.runtime.loadgen.timing import ArrivalClock

    clock = ArrivalClock()
    latencies_ns = [20_000 + 100 * (i * 37 % 256) for i in range(256)]  # 20.0-45.5 us, shuffled
    for lateness_ns in latencies_ns:
        clock._learn(lateness_ns)
    early = sum(lateness_ns <= clock.margin_ns for lateness_ns in latencies_ns) / 256
    assert 0.88 <= early <= 0.92  # the window's 90th percentile (the median gave 0.5)
    assert clock.margin_ns < 50_000  # below the cap: the quantile set it

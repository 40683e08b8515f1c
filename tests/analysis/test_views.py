"""The views compute exactly the figures of run directories built with known numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder, one, rows_of
from tests.analysis.runs import BASE_NS, collocated_run, single_pipeline_run


@pytest.fixture
def single_db(tmp_path: Path, db_path: Path) -> Path:
    load_runs([single_pipeline_run(tmp_path / "runs").write()], db_path)
    return db_path


@pytest.fixture
def colloc_db(tmp_path: Path, db_path: Path) -> Path:
    load_runs([collocated_run(tmp_path / "runs").write()], db_path)
    return db_path


def test_throughput_counts_ok_queries_over_the_window(single_db: Path) -> None:
    row = one(single_db, "SELECT * FROM throughput")
    assert (row["trial"], row["phase"], row["pipeline"]) == (0, "solo", "a")
    assert row["queries"] == 1010  # warm-up excluded
    assert row["ok_queries"] == 1000
    assert row["ok_samples"] == 2000
    assert (row["dropped"], row["errors"], row["timeouts"], row["not_issued"]) == (5, 3, 2, 0)
    assert row["window_s"] == pytest.approx(10.0)
    assert row["queries_per_s"] == pytest.approx(100.0)
    assert row["samples_per_s"] == pytest.approx(200.0)
    # Evenly spaced ok queries: every batch runs at ~100 q/s, so the interval is narrow.
    assert row["ci_method"] == "batch_means_10"
    assert row["queries_per_s_ci_low"] < 100.0 < row["queries_per_s_ci_high"]
    assert row["queries_per_s_ci_high"] - row["queries_per_s_ci_low"] < 10.0


def test_latency_counts_failures_as_infinite(single_db: Path) -> None:
    """1000 ok queries (100 each of 1..10 ms) and 10 failed ones (+inf) among 1010 measured.
    LoadGen's index floor(N p): p50 -> sorted[505] = 6 ms, p90 -> [909] = 10 ms, p99 -> [999] =
    10 ms, p99.9 -> [1008], a failure: +inf. Completed-only p50 -> sorted[500] of 1000 = 6 ms."""
    row = one(single_db, "SELECT * FROM latency")
    assert (row["measured_queries"], row["ok_queries"], row["failed_queries"]) == (1010, 1000, 10)
    assert row["latency_p50_ms"] == pytest.approx(6.0)
    assert row["latency_p90_ms"] == pytest.approx(10.0)
    assert row["latency_p99_ms"] == pytest.approx(10.0)
    assert row["latency_p999_ms"] == float("inf")
    assert row["completed_p50_ms"] == pytest.approx(6.0)
    assert row["completed_p999_ms"] == pytest.approx(10.0)
    assert row["completed_mean_ms"] == pytest.approx(5.5)
    assert row["completed_max_ms"] == pytest.approx(10.0)  # the 100 ms warm-up is left out
    assert row["from_issue_p50_ms"] == pytest.approx(5.95)  # 6 ms less the 50 us issue delay
    assert row["issue_delay_p50_us"] == pytest.approx(50.0)
    assert row["issue_delay_p99_us"] == pytest.approx(50.0)
    # All ten failures fall in the first batch: its p99 is infinite, so p99 has no interval,
    # while p50 has one (101 queries per batch, 2 needed).
    assert row["ci_method"] == "batch_means_10"
    assert row["latency_p50_ci_low_ms"] <= 6.0 <= row["latency_p50_ci_high_ms"]
    assert row["latency_p99_ci_low_ms"] is None and row["latency_p99_se_ms"] is None
    assert row["latency_p999_ci_low_ms"] is None


def test_stage_breakdown_splits_queue_wait_and_service(single_db: Path) -> None:
    row = one(single_db, "SELECT * FROM stage_breakdown")
    assert (row["stage"], row["visits"], row["queries"]) == ("s", 10, 10)  # warm-up visit out
    assert row["queue_wait_mean_ms"] == pytest.approx(1.0)
    assert row["queue_wait_p99_ms"] == pytest.approx(1.0)
    assert row["service_p50_ms"] == pytest.approx(2.0)
    assert row["busy_s"] == pytest.approx(0.02)
    assert row["join_wait_mean_ms"] is None  # no join


def test_stage_breakdown_splits_join_wait_from_queue_wait(tmp_path: Path, db_path: Path) -> None:
    """A join visit: first branch at 0, merge at 4 ms, started at 5 ms, finished at 6 ms."""
    run = RunBuilder(tmp_path, "20260110-000000-join", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 1, 10 * MS_NS, start_ns=BASE_NS)
    run.add(
        "stage_events",
        0,
        "solo",
        "a",
        query_id=0,
        stage="join",
        visit=0,
        enqueued_ns=BASE_NS,
        joined_ns=BASE_NS + 4 * MS_NS,
        started_ns=BASE_NS + 5 * MS_NS,
        finished_ns=BASE_NS + 6 * MS_NS,
        status="ok",
    )
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM stage_breakdown")
    assert row["join_wait_mean_ms"] == pytest.approx(4.0)
    assert row["join_wait_p99_ms"] == pytest.approx(4.0)
    assert row["queue_wait_mean_ms"] == pytest.approx(1.0)  # from the merge, not the arrival
    assert row["service_mean_ms"] == pytest.approx(1.0)


def test_contention_compares_collocated_with_solo(colloc_db: Path) -> None:
    found = {
        row["pipeline"]: row
        for row in rows_of(colloc_db, "SELECT * FROM contention ORDER BY pipeline")
    }
    assert set(found) == {"a", "b"}
    a, b = found["a"], found["b"]
    assert a["solo_queries_per_s"] == pytest.approx(100.0)
    assert a["collocated_queries_per_s"] == pytest.approx(50.0)
    assert a["throughput_ratio"] == pytest.approx(0.5)
    assert a["p50_slowdown"] == pytest.approx(2.0)
    assert a["p99_slowdown"] == pytest.approx(2.0)
    assert b["throughput_ratio"] == pytest.approx(1.0)
    assert b["p50_slowdown"] == pytest.approx(1.0)
    assert (a["solo_failed"], a["collocated_failed"]) == (0, 0)
    # Uniform queries: every batch equals the whole, so the intervals collapse onto the ratio
    # (zero spread) and b's 1.0 is "no measurable effect", a's halving "slower".
    assert a["ci_method"] == "batch_means_delta"
    assert a["throughput_ratio_ci_low"] == pytest.approx(0.5, rel=0.01)
    assert a["throughput_verdict"] == "slower"
    assert a["p50_verdict"] == "slower"
    assert b["throughput_verdict"] == "no measurable effect"
    assert b["p50_verdict"] == "no measurable effect"
    # 50 and 40 queries per batch: too few for a p99 per batch, so no p99 interval or verdict.
    assert a["p99_slowdown_ci_low"] is None and a["p99_verdict"] is None
    # Energy comes from energy_comparison: the GPU was sampled in the collocated phase only, so
    # the solo side has no complete figure and the ratio is NULL, never a partial sum.
    assert a["energy_per_query_ratio"] is None
    assert a["energy_source"] == "nvml_counter+rapl"


def test_energy_is_interpolated_over_each_load_window(colloc_db: Path) -> None:
    """E(t) interpolated between the samples around each window edge (see collocated_run):
    host solo a E(10) - E(0) = 25.5 - 1.25 = 24.25 J over [0, 10] s, solo b 36.25 - 2.5 =
    33.75 J, collocated 53.75 - 12.5 = 41.25 J; the GPU samples lie on the edges: 300 - 100."""
    found = {
        (row["phase"], row["pipeline"], row["device"]): row
        for row in rows_of(colloc_db, "SELECT * FROM energy")
    }
    assert set(found) == {
        ("solo", "a", "host"),
        ("solo", "b", "host"),
        ("collocated", None, "host"),
        ("collocated", None, "gpu:0"),
    }
    host = found[("collocated", None, "host")]
    assert host["energy_j"] == 41.25
    assert host["energy_source"] == "rapl"
    assert host["window_s"] == 10.0
    assert host["window_start_ns"] == BASE_NS + 40 * SECOND_NS
    assert host["window_end_ns"] == BASE_NS + 50 * SECOND_NS
    assert host["mean_power_w"] == 4.125
    assert host["window_covered"] is True
    assert host["samples"] == 2  # t = 3 and 7 s inside; -1 and 11 s only bracket the edges
    solo_a, solo_b = found[("solo", "a", "host")], found[("solo", "b", "host")]
    assert (solo_a["energy_j"], solo_a["window_covered"]) == (24.25, True)
    assert (solo_b["energy_j"], solo_b["window_covered"]) == (33.75, True)
    assert solo_b["window_start_ns"] == BASE_NS + 20 * SECOND_NS
    gpu = found[("collocated", None, "gpu:0")]
    assert (gpu["energy_j"], gpu["energy_source"]) == (200.0, "nvml_counter")
    assert (gpu["window_covered"], gpu["mean_power_w"]) == (True, 20.0)


def test_energy_ignores_preparation_and_drain(tmp_path: Path, db_path: Path) -> None:
    """A sampler started at spawn: 60 s of model loading at 100 W before the window [0, 10] s
    and a drain at 100 W after it, the load itself at 10 W. Samples every 3 s at t = -61, -58,
    ..., -1, 2, ..., 8, 11, ..., 35 s; cumulative E = 100 (t + 61) J up to t = -1 (6000 J),
    then 6000 + 10 (t + 1) up to t = 11 (6120 J), then 6120 + 100 (t - 11).
    E(0) = 6000 + 30 * 1/3 = 6010, E(10) = 6090 + 30 * 2/3 = 6110 -> 100 J, 10 W; the whole
    series spans 8520 J, which the view must not see."""
    run = RunBuilder(tmp_path, "20260108-000000-prep", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 100, 10 * SECOND_NS, start_ns=BASE_NS)
    times = range(-61, 36, 3)

    def cumulative(t: int) -> float:
        if t <= -1:
            return 100.0 * (t + 61)
        if t <= 11:
            return 6000.0 + 10 * (t + 1)
        return 6120.0 + 100 * (t - 11)

    run.energy_series(
        0,
        "solo",
        BASE_NS - 61 * SECOND_NS,
        [cumulative(t) for t in times],
        "rapl",
        period_ns=3 * SECOND_NS,
    )
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM energy")
    assert row["energy_j"] == pytest.approx(100.0, abs=1e-9)
    assert row["mean_power_w"] == pytest.approx(10.0, abs=1e-10)
    assert row["window_covered"] is True
    assert row["measured_s"] == 10.0
    assert row["samples"] == 3  # t = 2, 5, 8 s
    ppw = one(db_path, "SELECT * FROM perf_per_watt")
    assert ppw["queries_per_j"] == pytest.approx(1.0)


def test_uncovered_window_edges_give_no_energy(tmp_path: Path, db_path: Path) -> None:
    """Two solo baselines, windows [0, 10] s and [20, 30] s. a's sampler covers its window
    (0, 5, 12, 30 J at t = -1, 3, 7, 11 s -> 24.25 J, as in collocated_run). b's sampler
    started late: 0, 8, 16 J at t = 22, 26, 30 s. The last sample before t = 20 is a's (30 J at
    11 s): a drop to b's 0 J, another sampler's series, so nothing brackets b's start. b's
    energy is NULL (not 16 J clamped to the 8 s measured), with coverage 8 / 10."""
    run = RunBuilder(tmp_path, "20260109-000000-late", {"a": "server", "b": "server"})
    run.uniform_queries(0, "solo", "a", 100, 10 * SECOND_NS, start_ns=BASE_NS)
    run.uniform_queries(0, "solo", "b", 100, 10 * SECOND_NS, start_ns=BASE_NS + 20 * SECOND_NS)
    run.energy_series(
        0, "solo", BASE_NS - SECOND_NS, [0.0, 5.0, 12.0, 30.0], "rapl", period_ns=4 * SECOND_NS
    )
    run.energy_series(
        0, "solo", BASE_NS + 22 * SECOND_NS, [0.0, 8.0, 16.0], "rapl", period_ns=4 * SECOND_NS
    )
    load_runs([run.write()], db_path)
    found = {row["pipeline"]: row for row in rows_of(db_path, "SELECT * FROM energy")}
    a = found["a"]
    assert (a["energy_j"], a["window_covered"], a["coverage"]) == (24.25, True, 1.0)
    b = found["b"]
    assert (b["energy_j"], b["window_covered"], b["energy_source"]) == (None, False, None)
    assert (b["window_s"], b["measured_s"], b["coverage"]) == (10.0, 8.0, 0.8)
    assert b["mean_power_w"] is None


def test_perf_per_watt_is_queries_per_joule(colloc_db: Path) -> None:
    row = one(
        colloc_db,
        "SELECT * FROM perf_per_watt WHERE phase = 'collocated' AND device = 'host'",
    )
    assert row["ok_queries"] == 900  # both pipelines shared the host
    assert row["energy_j"] == 41.25  # the collocated load window only
    assert row["queries_per_j"] == pytest.approx(900 / 41.25)
    assert row["j_per_query"] == pytest.approx(41.25 / 900)
    assert row["energy_source"] == "rapl"
    solo = one(colloc_db, "SELECT * FROM perf_per_watt WHERE phase = 'solo' AND pipeline = 'a'")
    assert solo["queries_per_j"] == pytest.approx(1000 / 24.25)


def test_energy_is_null_without_a_source(tmp_path: Path, db_path: Path) -> None:
    run = RunBuilder(tmp_path, "20260103-000000-nosource", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 100, SECOND_NS, start_ns=0)
    run.energy_series(0, "solo", 0, [None, None, None], source=None)
    # A value without a source is not an energy figure either.
    run.energy_series(0, "solo", 0, [1.0, 2.0], source=None, gpu=0)
    load_runs([run.write()], db_path)
    for row in rows_of(db_path, "SELECT * FROM energy"):
        assert row["energy_j"] is None and row["energy_source"] is None, row
    ppw = rows_of(db_path, "SELECT * FROM perf_per_watt")
    assert len(ppw) == 2
    for row in ppw:
        assert row["ok_queries"] == 100
        assert row["queries_per_j"] is None and row["j_per_query"] is None, row


def test_a_single_energy_sample_is_no_figure(tmp_path: Path, db_path: Path) -> None:
    run = RunBuilder(tmp_path, "20260104-000000-onesample", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 10, SECOND_NS, start_ns=0)
    run.energy_series(0, "solo", 0, [5.0], source="rapl")
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM energy")
    assert row["energy_j"] is None and row["energy_source"] is None


def test_contention_without_solo_baseline_has_null_ratios(tmp_path: Path, db_path: Path) -> None:
    run = RunBuilder(tmp_path, "20260105-000000-nosolo", {"a": "server", "b": "server"})
    run.uniform_queries(0, "collocated", "a", 10, SECOND_NS, start_ns=0)
    run.uniform_queries(0, "collocated", "b", 10, SECOND_NS, start_ns=0)
    load_runs([run.write()], db_path)
    found = rows_of(db_path, "SELECT * FROM contention ORDER BY pipeline")
    assert [row["pipeline"] for row in found] == ["a", "b"]
    assert all(row["throughput_ratio"] is None for row in found)
    assert all(row["throughput_verdict"] is None for row in found)


def test_latency_by_run_averages_trials_with_a_t_interval(tmp_path: Path, db_path: Path) -> None:
    run = RunBuilder(tmp_path, "20260106-000000-trials", {"a": "server"})
    for trial, count in enumerate((100, 200, 400)):  # latencies 10, 5, 2.5 ms
        run.uniform_queries(trial, "solo", "a", count, SECOND_NS, start_ns=trial * 10 * SECOND_NS)
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM latency_by_run")
    assert (row["trials"], row["measured_queries"], row["failed_queries"]) == (3, 700, 0)
    values = [10.0, 5.0, 2.5]
    mean = sum(values) / 3
    sd = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5
    half = 4.3027 * sd / 3**0.5  # t(0.975, 2)
    assert row["latency_p50_ms"] == pytest.approx(mean)
    assert row["latency_p50_ci_low_ms"] == pytest.approx(mean - half)
    assert row["latency_p50_ci_high_ms"] == pytest.approx(mean + half)
    assert row["queries_per_s"] == pytest.approx((100 + 200 + 400) / 3)
    assert row["ci_method"] == "t_over_trials"


def test_stage_breakdown_counts_each_query_of_a_revisited_stage_once(
    tmp_path: Path, db_path: Path
) -> None:
    """A loop: query 0 visits `loop` three times, queries 1 and 2 once (5 visits, 3 queries);
    `once` sees each query once. Both the revisited and the single-visit paths of the
    definition count queries, not visits."""
    run = RunBuilder(tmp_path, "20260111-000000-loop", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 3, 10 * MS_NS, start_ns=BASE_NS)
    visits = [(0, "loop", 1), (0, "loop", 2), (0, "loop", 3), (1, "loop", 1), (2, "loop", 1)]
    visits += [(query_id, "once", 1) for query_id in range(3)]
    for query_id, stage, visit in visits:
        started_ns = BASE_NS + (query_id * 10 + visit) * MS_NS
        run.add(
            "stage_events",
            0,
            "solo",
            "a",
            query_id=query_id,
            stage=stage,
            visit=visit,
            enqueued_ns=started_ns,
            started_ns=started_ns,
            finished_ns=started_ns + MS_NS,
            status="ok",
        )
    load_runs([run.write()], db_path)
    found = rows_of(db_path, "SELECT stage, visits, queries FROM stage_breakdown ORDER BY stage")
    assert found == [
        {"stage": "loop", "visits": 5, "queries": 3},
        {"stage": "once", "visits": 3, "queries": 3},
    ]


def test_stage_concurrency_counts_overlapping_visits(tmp_path: Path, db_path: Path) -> None:
    """Visits of `pool` at [0, 4), [1, 3), [2, 6), [6, 8) ms: three at once at 2 ms; the one
    that starts as another finishes (6 ms) does not overlap it. `one` runs a visit at a time."""
    run = RunBuilder(tmp_path, "20260110-000000-conc", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 4, 10 * MS_NS, start_ns=BASE_NS)
    for query_id, (start_ms, end_ms) in enumerate([(0, 4), (1, 3), (2, 6), (6, 8)]):
        for stage, offset_ms in (("pool", 0), ("one", 10 * query_id)):
            run.add(
                "stage_events",
                0,
                "solo",
                "a",
                query_id=query_id,
                stage=stage,
                visit=1,
                enqueued_ns=BASE_NS,
                started_ns=BASE_NS + (start_ms + offset_ms) * MS_NS,
                finished_ns=BASE_NS + (end_ms + offset_ms) * MS_NS,
                status="ok",
            )
    load_runs([run.write()], db_path)
    pool = one(
        db_path, "SELECT * FROM stage_concurrency('20260110-000000-conc') WHERE stage = 'pool'"
    )
    assert (pool["visits"], pool["in_flight_max"]) == (4, 3)
    assert pool["busy_s"] == pytest.approx(0.008)
    assert pool["service_s"] == pytest.approx(0.012)  # 4 + 2 + 4 + 2 ms
    assert pool["in_flight_mean"] == pytest.approx(12 / 8)
    alone = one(
        db_path, "SELECT * FROM stage_concurrency('20260110-000000-conc') WHERE stage = 'one'"
    )
    assert (alone["in_flight_max"], alone["in_flight_mean"]) == (1, pytest.approx(1.0))


def test_a_bursty_few_query_rate_interval_stays_at_or_above_zero(
    tmp_path: Path, db_path: Path
) -> None:
    """20 queries: 18 complete together at 0.1 s, 2 after a 10 s stall. Two batches span
    ~0 s (a huge rate), the others little: the t interval around the mean reaches below 0,
    and a rate cannot, so its low end is 0 (the high end as computed)."""
    run = RunBuilder(tmp_path / "runs", "20260105-000000-bursty", {"a": "server"})
    for index in range(20):
        done = BASE_NS + (100 * MS_NS + index * 1_000 if index < 18 else (10 + index) * SECOND_NS)
        run.add(
            "queries", 0, "solo", "a", query_id=index, scheduled_ns=BASE_NS,
            issued_ns=BASE_NS, completed_ns=done, status="ok", samples=1, warmup=False,
        )  # fmt: skip
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM throughput")
    assert row["ci_method"] == "batch_means_10"
    assert row["queries_per_s_ci_low"] == 0.0
    assert row["queries_per_s_ci_high"] > row["queries_per_s"] > 0

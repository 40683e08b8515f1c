"""A probe's record from its run: counts, verdict and blocks from every measured query's
verdict latency; an early stop reads `missed` with its reason; a crashed run is recorded with
the crash, `missed` only when its data says so; a ray's verdict combines its pipelines'."""

from __future__ import annotations

import math
from pathlib import Path

from stages.capacity import probe_executor
from stages.capacity.controller import ProbeRequest
from stages.capacity.probe_executor import ProbeExecutor, batches_of, combined_verdict
from stages.collocation.results import PipelineOutcome, RunResult
from stages.contracts.capacity_files import SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule
from stages.validation.loading import validate_document

SPEC = validate_document(
    {
        "name": "demo",
        "pipelines": [
            {
                "name": name,
                "loadgen": {"type": "server", "rate": 10, "slo_ms": 50},
                "stages": [{"id": "s", "type": "sleep"}],
            }
            for name in ("a", "b")
        ],
    }
)


# 4% of 2000 queries over the SLO, spread out (a gap of 24 within the SLO between any two,
# so no two are one burst: design effect 1): certainly missed.
SPREAD_FAILURES = [math.inf if i % 25 == 0 else 10.0 for i in range(2000)]


def executor(latencies: dict[str, list[float]], **settings: object) -> ProbeExecutor:
    fields = {"search_id": "s", "pipeline": "a", "slo_ms": 50, "probe_s": 10, "min_rate": 1}
    fields.update(settings)
    return ProbeExecutor(
        loaded=SPEC,
        settings=SearchSettings.model_validate(fields),
        probe_runs_dir=Path("/nonexistent"),
        cache_dir=Path("/nonexistent"),
        rule=LoadgenSloRule(),
        verdict_latencies=lambda run_dir: latencies,
    )


def run(status: str = "ok", *outcomes: tuple[str, str]) -> RunResult:
    results = [PipelineOutcome(0, "solo", name, status=state) for name, state in outcomes]
    return RunResult("r", Path("/runs/r"), status, results)


def test_a_met_probe_has_its_counts_blocks_and_p99() -> None:
    latencies = [10.0] * 995 + [60.0] * 4 + [math.inf]  # 5 over of 1000: LoadGen allows 2
    record = executor({"a": latencies}).record(
        3, ProbeRequest("search", 100, 4, False), run("ok", ("a", "ok")), None, 11.2
    )
    assert (record.index, record.rate, record.seed) == (3, 100, 4)
    assert (record.queries, record.over_slo) == (1000, 5)
    assert record.verdict == "undecided"  # not met (5 > 2 allowed), not provably missed
    assert record.p99_ms == 10.0  # nearest rank 990 of 1000
    assert record.batches == [(100, 0)] * 9 + [(100, 5)]
    assert record.pipelines["a"].throughput_qps == 99.9  # 999 completed over 10 s
    assert record.abort_reason is None and record.run_dir == "/runs/r"


def test_an_early_stop_reads_missed_with_its_reason_when_its_counts_prove_it() -> None:
    record = executor({"a": ([10.0] * 25 + [80.0]) * 20}).record(
        0, ProbeRequest("search", 100, 0, False), run("interrupted"), "cannot pass: x", 3.0
    )
    assert record.verdict == "missed" and record.abort_reason == "cannot pass: x"
    assert not record.cannot_pass  # proven missed: 20 scattered of 520 over a p99 SLO
    assert record.throughput_qps is None  # the window was cut short: no rate from it
    assert sum(queries for queries, _ in record.batches) == 520


def test_an_early_stop_that_proves_nothing_is_undecided_and_cannot_pass() -> None:
    """One query over the SLO among 40 stops a probe planned for 459 (none may be over), yet
    1 in 40 does not prove a p99 above the SLO: not met, not missed."""
    record = executor({"a": [10.0] * 39 + [80.0]}).record(
        0, ProbeRequest("search", 46, 0, False), run("interrupted"), "cannot pass: y", 1.0
    )
    assert record.verdict == "undecided" and record.cannot_pass
    backlog = executor({"a": [10.0] * 39 + [80.0]}).record(
        0, ProbeRequest("search", 46, 0, False), run("interrupted"), "backlog grows", 1.0, True
    )
    assert backlog.verdict == "missed" and not backlog.cannot_pass


def test_a_crashed_run_is_recorded_not_lost() -> None:
    good = [10.0] * 2000
    crashed = run("failed", ("a", "failed"))
    record = executor({"a": good}).record(
        0, ProbeRequest("search", 200, 0, False), crashed, None, 1
    )
    assert record.verdict == "undecided"  # its data would pass: try again, do not trust it
    assert record.abort_reason is not None and record.abort_reason.startswith("run failed: a")
    record = executor({"a": SPREAD_FAILURES}).record(
        0, ProbeRequest("search", 200, 0, False), crashed, None, 1
    )
    assert record.verdict == "missed"


def test_a_run_without_data_is_still_a_record() -> None:
    def unreadable(run_dir: Path) -> dict[str, list[float]]:
        raise FileNotFoundError("no queries table")

    probe = executor({})
    probe.verdict_latencies = unreadable
    record = probe.record(0, ProbeRequest("search", 50, 0, False), run("failed"), None, 1)
    assert record.queries == 0 and record.verdict == "undecided"
    assert "no queries table" in str(record.abort_reason)


def test_a_co_runner_is_reported_but_does_not_decide() -> None:
    latencies = {"a": [10.0] * 1000, "b": SPREAD_FAILURES}
    probe = executor(latencies, **{"with": {"b": 5.0}})
    record = probe.record(0, ProbeRequest("search", 100, 0, False), run("ok"), None, 1)
    assert record.verdict == "met"
    assert record.pipelines["b"].verdict == "missed"
    assert record.pipelines["b"].rate_qps == 5.0


def test_a_ray_probe_combines_both_verdicts() -> None:
    latencies = {"a": [10.0] * 1000, "b": SPREAD_FAILURES}
    ray = executor(latencies, pipeline="a+b", ray={"a": 200.0, "b": 100.0})
    record = ray.record(0, ProbeRequest("search", 0.5, 0, False), run("ok"), None, 1)
    assert record.verdict == "missed"
    assert record.queries == 3000 and record.over_slo == 80
    assert record.design_effect == 1.0
    assert {name: p.rate_qps for name, p in record.pipelines.items()} == {"a": 100, "b": 50}
    assert combined_verdict(["met", "undecided"]) == "undecided"
    assert combined_verdict(["met", "met"]) == "met"
    assert combined_verdict([None]) is None


def test_a_burst_counts_as_fewer_independent_queries() -> None:
    # The same 80 failures in one run of queries: one burst, design effect 80, so the verdict
    # sees 25 independent queries with 1 over: too few to say anything.
    burst = [10.0] * 1000 + [math.inf] * 80 + [10.0] * 920
    record = executor({"a": burst}).record(
        0, ProbeRequest("search", 200, 0, False), run("ok"), None, 1
    )
    assert record.design_effect == 80.0
    assert (record.queries, record.over_slo, record.verdict) == (2000, 80, "undecided")


def test_blocks_split_in_order_and_add_up() -> None:
    latencies = [100.0] * 7 + [1.0] * 16
    blocks = batches_of(latencies, 50)
    assert len(blocks) == 10 and sum(q for q, _ in blocks) == 23
    assert sum(o for _, o in blocks) == 7 and blocks[0][1] == blocks[0][0]


def test_the_pipeline_that_stopped_a_ray_probe_reads_missed() -> None:
    latencies = {"a": [10.0] * 1000, "b": [10.0] * 990 + [80.0] * 10}
    ray = executor(latencies, pipeline="a+b", ray={"a": 200.0, "b": 100.0})
    stopped = ray.record(
        0, ProbeRequest("search", 0.5, 0, False), run(), "b: backlog grows", 1, True
    )
    record = probe_executor._missed_by(stopped, "b")
    assert record.verdict == "missed"
    assert (record.pipelines["a"].verdict, record.pipelines["b"].verdict) == ("met", "missed")


def test_a_closed_loop_ceiling_counts_its_drain() -> None:
    """64 clients on a 36 ms server over a 4 s window: every query issued completes, the last
    64 after the window (latency ~2.3 s); the ceiling is ~27.7 q/s, not 172 / 4 = 43."""
    latencies = [36.0 * (k + 1) for k in range(64)] + [2304.0] * 108
    naive = probe_executor._throughput(latencies, 4.0, None)
    ceiling = probe_executor._throughput(latencies, 4.0, 64)
    assert naive == 43.0
    assert ceiling is not None and 26.5 < ceiling < 28.0
    assert probe_executor._throughput([math.inf], 4.0, 64) == 0.0
    assert probe_executor._throughput(latencies, None, 64) is None

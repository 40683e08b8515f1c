"""The `tokens` view (named `generation` before issue 10): TTFT from arrival and stage-local,
TPOT, inter-token latency from `token_events` and tokens/s; `token_goodput` against the
loadgen's token SLOs; on hand-made rows whose figures are known exactly (LoadGen percentiles:
sorted[floor(N * p)])."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from analysis.reports.report import report
from analysis.reports.report_entries import MARKDOWN_NUMBERS
from analysis.reports.report_file import write_report
from analysis.warehouse.loader import load_runs
from stages.cli.commands.report import _worth_showing_after_run
from stages.validation.loading import validate_document
from tests.analysis.rundirs import MS_NS, RunBuilder, definition_rows_of, one, rows_of
from tests.analysis.runs import BASE_NS


def generation_run(root: Path) -> RunBuilder:
    """Pipeline g, 10 measured queries 100 ms apart. Query i: enqueued 1 ms after its arrival,
    started at 2 + i ms, first token (i + 1) ms after the start, so stage TTFT = i + 1 ms and
    TTFT from arrival = 2i + 3 ms; 5 tokens 1 + i ms apart (TPOT i + 1 ms), except query 9 with
    one token (no TPOT); completed 1 ms after the stage finished. Also: two warm-up queries
    with slow generations, an error visit carrying a first-token time, and a stage with no
    tokens, all of which the view must leave out."""
    run = RunBuilder(root, "20260103-000000-gen", {"g": "server"})

    def query(query_id: int, scheduled: int, completed: int, warmup: bool) -> None:
        run.add(
            "queries",
            0,
            "solo",
            "g",
            query_id=query_id,
            scheduled_ns=scheduled,
            issued_ns=scheduled + 50_000,
            completed_ns=completed,
            status="ok",
            samples=1,
            warmup=warmup,
        )

    def event(
        query_id: int,
        stage: str,
        scheduled: int,
        started: int,
        first: int | None,
        finished: int,
        tokens: int | None,
        status: str = "ok",
        visit: int = 1,
    ) -> None:
        run.add(
            "stage_events",
            0,
            "solo",
            "g",
            query_id=query_id,
            stage=stage,
            visit=visit,
            enqueued_ns=scheduled + MS_NS,
            started_ns=started,
            finished_ns=finished,
            status=status,
            first_token_ns=first,
            tokens=tokens,
        )

    for index in range(2):  # warm-up: a second before the window, very slow
        scheduled = BASE_NS - 1000 * MS_NS + index * MS_NS
        event(
            index,
            "generate",
            scheduled,
            scheduled,
            scheduled + 500 * MS_NS,
            scheduled + 900 * MS_NS,
            5,
        )
        query(index, scheduled, scheduled + 901 * MS_NS, True)
    for index in range(10):
        query_id = 10 + index
        scheduled = BASE_NS + index * 100 * MS_NS
        started = scheduled + (2 + index) * MS_NS
        first = started + (index + 1) * MS_NS
        tokens = 1 if index == 9 else 5
        finished = first + (tokens - 1) * (index + 1) * MS_NS if tokens > 1 else first + MS_NS
        event(query_id, "prompts", scheduled, scheduled, None, scheduled + 10_000, None)
        event(query_id, "generate", scheduled, started, first, finished, tokens)
        query(query_id, scheduled, finished + MS_NS, False)
    # An error visit (a second visit of query 10) with a first-token time: not counted.
    event(
        10,
        "generate",
        BASE_NS,
        BASE_NS,
        BASE_NS + 50 * MS_NS,
        BASE_NS + 60 * MS_NS,
        None,
        status="error",
        visit=2,
    )
    return run


def test_generation_figures(tmp_path: Path, db_path: Path) -> None:
    run = generation_run(tmp_path)
    load_runs([run.write()], db_path)
    rows = rows_of(db_path, "SELECT * FROM tokens")
    assert [row["stage"] for row in rows] == ["generate"]  # the prompts stage has no tokens
    row = one(db_path, "SELECT * FROM tokens")
    assert row["queries"] == 10 and row["generations"] == 10
    assert row["tokens"] == 9 * 5 + 1
    # Stage-local TTFT: 1..10 ms. TTFT from arrival: 3, 5, ..., 21 ms.
    assert row["stage_ttft_p50_ms"] == pytest.approx(6.0)
    assert row["stage_ttft_p90_ms"] == pytest.approx(10.0)
    assert row["stage_ttft_p99_ms"] == pytest.approx(10.0)
    assert row["ttft_p50_ms"] == pytest.approx(13.0)
    assert row["ttft_p90_ms"] == pytest.approx(21.0)
    assert row["ttft_p99_ms"] == pytest.approx(21.0)
    # TPOT over the nine queries with more than one token: 1..9 ms.
    assert row["tpot_mean_ms"] == pytest.approx(5.0)
    assert row["tpot_p50_ms"] == pytest.approx(5.0)
    assert row["tpot_p99_ms"] == pytest.approx(9.0)
    # Window: first scheduled measured query (0 ms) to the last completion (900 + 11 + 10 + 1
    # + 1 ms), the throughput view's window.
    assert row["window_s"] == pytest.approx(0.923)
    assert row["tokens_per_s"] == pytest.approx(46 / 0.923)
    throughput = one(db_path, "SELECT window_s FROM throughput")
    assert throughput["window_s"] == pytest.approx(row["window_s"])


# Streamed answers (token_events): pipeline s, stage chat. Measured query i (0..9) is scheduled
# 100 ms apart, starts 1 ms after its arrival, and its first token comes i + 1 ms later: TTFT
# from arrival = i + 2 ms. Four chunks with gaps 1 ms, 2 ms and 3 * (10 - i) ms, the last chunk
# at finished_ns: TPOT = (3 + 3 * (10 - i)) / 3 = 11 - i ms.
def stream_gaps_ms(index: int) -> list[int]:
    return [1, 2, 3 * (10 - index)]


def loadgen_percentile(values: list[float], p: float) -> float:
    """LoadGen's percentile (macro loadgen_quantiles): sorted[floor(N * p)]."""
    return sorted(values)[int(len(values) * p)]


def wilson95(p: float, n: int, side: int) -> float:
    z = 1.96
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + side * spread) / (1 + z * z / n)


def streaming_run(root: Path, loadgen_fields: dict[str, Any] | None = None) -> RunBuilder:
    """Ten measured streamed answers as above; two warm-up answers with 500 ms gaps; an error
    visit with 1 s gaps (query 20, status error); a query never issued (21): all must stay out
    of ITL, and 20 and 21 count as not good in the goodput denominator (12 queries)."""
    run = RunBuilder(
        root, "20260104-000000-stream", {"s": "server"}, loadgen_fields={"s": loadgen_fields or {}}
    )

    def stream(query_id: int, scheduled: int, ttft_ms: int, gaps_ms: list[int], status: str) -> int:
        started = scheduled + MS_NS
        first = started + (ttft_ms - 1) * MS_NS
        times = [first]
        for gap in gaps_ms:
            times.append(times[-1] + gap * MS_NS)
        run.add("stage_events", 0, "solo", "s", query_id=query_id, stage="chat", visit=1,
                enqueued_ns=scheduled, started_ns=started, finished_ns=times[-1], status=status,
                first_token_ns=first, tokens=len(times))  # fmt: skip
        for index, ts in enumerate(times):
            run.add("token_events", 0, "solo", "s", query_id=query_id, stage="chat", visit=1,
                    token_index=index, ts_ns=ts)  # fmt: skip
        return times[-1]

    def query(
        query_id: int, scheduled: int, completed: int | None, status: str, warmup: bool
    ) -> None:
        run.add("queries", 0, "solo", "s", query_id=query_id, scheduled_ns=scheduled,
                issued_ns=None if status == "not_issued" else scheduled, completed_ns=completed,
                status=status, samples=1, warmup=warmup)  # fmt: skip

    for index in range(2):
        scheduled = BASE_NS - 1000 * MS_NS + index * MS_NS
        end = stream(index, scheduled, 400, [500, 500, 500], "ok")
        query(index, scheduled, end + MS_NS, "ok", True)
    for index in range(10):
        scheduled = BASE_NS + index * 100 * MS_NS
        end = stream(10 + index, scheduled, index + 2, stream_gaps_ms(index), "ok")
        query(10 + index, scheduled, end + MS_NS, "ok", False)
    end = stream(20, BASE_NS + 50 * MS_NS, 2, [1000, 1000], "error")
    query(20, BASE_NS + 50 * MS_NS, end, "error", False)
    query(21, BASE_NS + 150 * MS_NS, None, "not_issued", False)
    return run


def test_inter_token_latency_from_token_events(tmp_path: Path, db_path: Path) -> None:
    load_runs([streaming_run(tmp_path).write()], db_path)
    row = one(db_path, "SELECT * FROM tokens")
    assert row["queries"] == 10 and row["tokens"] == 40
    gaps = [float(gap) for index in range(10) for gap in stream_gaps_ms(index)]
    assert row["itl_gaps"] == 30
    # 30 gaps: ten of 1 ms, ten of 2 ms, then 3, 6, ..., 30: sorted[15] = 2, sorted[29] = 30.
    assert row["itl_p50_ms"] == pytest.approx(loadgen_percentile(gaps, 0.5)) == pytest.approx(2)
    assert row["itl_p99_ms"] == pytest.approx(loadgen_percentile(gaps, 0.99))
    assert row["itl_p99_ms"] == pytest.approx(30)  # the warm-up's 500 ms, the error's 1 s: out
    # TPOT is the mean gap of a visit (11 - i ms: 2..11), TTFT from arrival i + 2 ms (2..11).
    assert row["tpot_p50_ms"] == pytest.approx(7) and row["tpot_p99_ms"] == pytest.approx(11)
    assert row["ttft_p50_ms"] == pytest.approx(7) and row["ttft_p99_ms"] == pytest.approx(11)
    # The stored summary is its definition over the raw rows.
    assert definition_rows_of(db_path, "SELECT * FROM tokens_from_rows") == [row]


def test_no_token_events_means_no_inter_token_latency(tmp_path: Path, db_path: Path) -> None:
    load_runs([generation_run(tmp_path).write()], db_path)
    row = one(db_path, "SELECT itl_gaps, itl_p50_ms, itl_p99_ms FROM tokens")
    assert row == {"itl_gaps": 0, "itl_p50_ms": None, "itl_p99_ms": None}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("slos", "good_indexes"),
    [
        ({"ttft_slo_ms": 6}, range(0, 5)),  # TTFT i + 2 <= 6
        ({"tpot_slo_ms": 8}, range(3, 10)),  # TPOT 11 - i <= 8
        ({"ttft_slo_ms": 6, "tpot_slo_ms": 8}, range(3, 5)),  # both
    ],
)
def test_token_goodput_counts_failures_as_not_good(
    tmp_path: Path, db_path: Path, slos: dict[str, float], good_indexes: range
) -> None:
    load_runs([streaming_run(tmp_path, slos).write()], db_path)
    row = one(db_path, "SELECT * FROM token_goodput")
    good = len(good_indexes)
    assert (row["pipeline"], row["stage"]) == ("s", "chat")
    assert row["ttft_slo_ms"] == slos.get("ttft_slo_ms")
    assert row["tpot_slo_ms"] == slos.get("tpot_slo_ms")
    # The denominator: every measured query, the error and the never-issued one included.
    assert (row["queries"], row["ok_queries"], row["failed_queries"]) == (12, 10, 2)
    assert row["good_queries"] == good and row["good_tokens"] == 4 * good
    assert row["goodput_share"] == pytest.approx(good / 12)
    assert row["goodput_share_ci_low"] == pytest.approx(wilson95(good / 12, 12, -1))
    assert row["goodput_share_ci_high"] == pytest.approx(wilson95(good / 12, 12, 1))
    assert row["ci_method"] == "wilson_95"
    window_s = one(db_path, "SELECT window_s FROM throughput")["window_s"]
    assert row["window_s"] == pytest.approx(window_s)
    assert row["goodput_per_s"] == pytest.approx(good / window_s)
    assert row["good_tokens_per_s"] == pytest.approx(4 * good / window_s)
    assert definition_rows_of(db_path, "SELECT * FROM token_goodput_from_rows") == [row]


def test_token_goodput_without_a_token_slo_is_null(tmp_path: Path, db_path: Path) -> None:
    load_runs([streaming_run(tmp_path, {"slo_ms": 50}).write()], db_path)
    row = one(db_path, "SELECT * FROM token_goodput")
    assert row["queries"] == 12 and row["failed_queries"] == 2
    figures = ("ttft_slo_ms", "tpot_slo_ms", "good_queries", "good_tokens", "goodput_share",
               "goodput_share_ci_low", "goodput_share_ci_high", "ci_method", "goodput_per_s",
               "good_tokens_per_s")  # fmt: skip
    assert {name: row[name] for name in figures} == dict.fromkeys(figures)


def test_token_slos_reach_pipeline_specs_from_a_validated_spec(
    tmp_path: Path, db_path: Path
) -> None:
    document = {"name": "b", "pipelines": [{"name": "s", "loadgen": {
        "type": "server", "rate": 5, "ttft_slo_ms": 250, "tpot_slo_ms": 40.5},
        "stages": [{"id": "chat", "type": "noop"}]}]}  # fmt: skip
    loadgen = validate_document(document).normalized["pipelines"][0]["loadgen"]
    assert (loadgen["ttft_slo_ms"], loadgen["tpot_slo_ms"]) == (250, 40.5)
    fields = {key: loadgen[key] for key in ("ttft_slo_ms", "tpot_slo_ms")}
    load_runs([streaming_run(tmp_path, fields).write()], db_path)
    row = one(db_path, "SELECT scenario, slo_ms, ttft_slo_ms, tpot_slo_ms FROM pipeline_specs")
    assert row == {"scenario": "server", "slo_ms": None, "ttft_slo_ms": 250.0, "tpot_slo_ms": 40.5}
    assert one(db_path, "SELECT good_queries FROM token_goodput")["good_queries"] == 10


@pytest.mark.slow
def test_report_shows_token_figures_and_token_goodput(tmp_path: Path, db_path: Path) -> None:
    load_runs([streaming_run(tmp_path, {"ttft_slo_ms": 6, "tpot_slo_ms": 8}).write()], db_path)
    text = write_report(db_path, out_dir=tmp_path / "out").report_md.read_text(encoding="utf-8")
    window_s = one(db_path, "SELECT window_s FROM throughput")["window_s"]
    number = MARKDOWN_NUMBERS
    # TTFT p50/p99 7, 11; TPOT 7, 11; ITL 2, 30 ms; output tokens/s.
    tokens_row = f"| 0 | solo | s | chat | 7 | 11 | 7 | 11 | 2 | 30 | {number(40 / window_s)} |"
    assert "## Tokens per trial" in text and tokens_row in text.splitlines()
    share = f"{number(2 / 12)} [{number(wilson95(2 / 12, 12, -1))}, "
    share += f"{number(wilson95(2 / 12, 12, 1))}]"
    goodput_row = (
        f"| 0 | solo | s | chat | 6 | 8 | 12 | 2 | {share} | wilson_95 | "
        f"{number(2 / window_s)} | {number(8 / window_s)} |"
    )
    assert "## Token goodput per trial" in text and goodput_row in text.splitlines()
    frames = report(db_path)
    assert _worth_showing_after_run("token_goodput", frames["token_goodput"])


@pytest.mark.slow
def test_report_leaves_token_goodput_out_without_a_token_slo(tmp_path: Path, db_path: Path) -> None:
    load_runs([streaming_run(tmp_path).write()], db_path)
    text = write_report(db_path, out_dir=tmp_path / "out").report_md.read_text(encoding="utf-8")
    assert "## Tokens per trial" in text and "Token goodput" not in text
    frames = report(db_path)
    assert len(frames["token_goodput"]) == 1  # the row is there, with NULL figures
    assert not _worth_showing_after_run("token_goodput", frames["token_goodput"])


def test_a_phase_where_the_stage_answered_nothing_has_goodput_zero(
    tmp_path: Path, db_path: Path
) -> None:
    run = streaming_run(tmp_path, {"ttft_slo_ms": 6})
    for query_id in range(3):  # collocated: the server refused every request, no first token
        scheduled = BASE_NS + 5000 * MS_NS + query_id * 100 * MS_NS
        run.add("stage_events", 0, "collocated", "s", query_id=query_id, stage="chat", visit=1,
                enqueued_ns=scheduled, started_ns=scheduled, finished_ns=scheduled + MS_NS,
                status="error")  # fmt: skip
        run.add("queries", 0, "collocated", "s", query_id=query_id, scheduled_ns=scheduled,
                issued_ns=scheduled, completed_ns=scheduled + MS_NS, status="error", samples=1,
                warmup=False)  # fmt: skip
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM token_goodput WHERE phase = 'collocated'")
    assert (row["stage"], row["queries"], row["failed_queries"]) == ("chat", 3, 3)
    assert (row["good_queries"], row["goodput_share"], row["good_tokens"]) == (0, 0.0, 0)
    assert row["goodput_share_ci_high"] == pytest.approx(wilson95(0.0, 3, 1))
    assert one(db_path, "SELECT good_queries FROM token_goodput WHERE phase = 'solo'") == {
        "good_queries": 5
    }

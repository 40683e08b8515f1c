"""The `tokens` view (named `generation` before issue 10): TTFT from arrival and stage-local,
TPOT and tokens/s, on hand-made rows whose figures are known exactly (LoadGen percentiles:
sorted[floor(N * p)])."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.loader import load_runs
from tests.analysis.rundirs import MS_NS, RunBuilder, one, rows_of
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

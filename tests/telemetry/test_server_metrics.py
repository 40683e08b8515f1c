"""The server-metrics scraper against a real Prometheus exposition (prometheus_client, served
over loopback by tests/services/metrics_server.py): the text parser reads what the client
library's own parser reads; the scraper writes one row per sample at the asked period, `up` per
scrape, and an endpoint that errs or dies is a gap (`up` 0 rows, one warning with its start and
end), never the scraper's end."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stages.contracts.warnings import WarningCode
from stages.rundir.tables import ChunkWriter, read_table
from stages.telemetry.prometheus_text import parse_exposition
from stages.telemetry.sampler_process import run_periodic
from stages.telemetry.server_metrics import MetricsTarget, ServerMetricsResult, ServerMetricsScraper
from tests.services.metrics_server import MetricsServer, VllmLikeMetrics

KEYS = {"run_id": "r", "trial": 0, "phase": "collocated"}


@pytest.fixture
def server() -> Any:
    stand_in = MetricsServer()
    yield stand_in
    stand_in.stop()


def test_the_parser_reads_what_prometheus_client_reads() -> None:
    text = VllmLikeMetrics().render().decode()
    ours, bad = parse_exposition(text)
    theirs = [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    assert bad == 0
    assert [(s.metric, s.labels, s.value) for s in ours] == theirs
    names = {s.metric for s in ours}
    assert {"vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket"} <= names
    assert ours[0].labels == {"model_name": 'tiny "lm"'}  # the escaped quote read back


def test_odd_lines_are_counted_and_skipped() -> None:
    text = 'a 1\nb{x="1" 2\nc{y="2"} not_a_number\nd{z="a\\\\b",w="n\\nl"} +Inf 1700000000\n'
    samples, bad = parse_exposition(text)
    assert bad == 2
    assert [(s.metric, s.labels, s.value) for s in samples] == [
        ("a", {}, 1.0),
        ("d", {"z": "a\\b", "w": "n\nl"}, float("inf")),
    ]


def scrape_for(
    tmp_path: Path, target: MetricsTarget, seconds: float, during: Any = None
) -> tuple[ServerMetricsResult, list[dict[str, Any]]]:
    """Run a scraper on its fixed-rate schedule for `seconds` (calling `during()` halfway);
    its result and rows."""
    scraper = ServerMetricsScraper(target, ChunkWriter(tmp_path, "server_samples", "t", KEYS), KEYS)
    stop = threading.Event()
    thread = threading.Thread(target=run_periodic, args=(scraper.scrape, stop, target.period_ms))
    thread.start()
    time.sleep(seconds / 2)
    if during is not None:
        during()
    time.sleep(seconds / 2)
    stop.set()
    thread.join()
    return scraper.close(), read_table(tmp_path, "server_samples").to_pylist()


def test_rows_at_the_asked_period(tmp_path: Path, server: MetricsServer) -> None:
    target = MetricsTarget("vllm", f"{server.url}/metrics", period_ms=100, timeout_ms=500)
    result, rows = scrape_for(tmp_path, target, 1.2)
    up = sorted(row["ts_ns"] for row in rows if row["metric"] == "up")
    assert all(row["value"] == 1.0 for row in rows if row["metric"] == "up")
    assert result.failed == 0 and result.scrapes == len(up) >= 10
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(up)]
    assert sorted(gaps_ms)[len(gaps_ms) // 2] == pytest.approx(100, abs=20)
    running = [row for row in rows if row["metric"] == "vllm:num_requests_running"]
    assert len(running) == len(up)
    assert json.loads(running[0]["labels"]) == {"model_name": 'tiny "lm"'}
    assert len({row["value"] for row in running}) > 1  # the values move
    assert not any(row["metric"].endswith("_bucket") for row in rows)  # buckets: false
    assert {row["service"] for row in rows} == {"vllm"}
    assert {(row["run_id"], row["trial"], row["phase"], row["pipeline"]) for row in rows} == {
        ("r", 0, "collocated", None)
    }


def test_an_erring_endpoint_is_a_closed_gap(tmp_path: Path, server: MetricsServer) -> None:
    """503 for 0.4 s in the middle: `up` 0 rows then, scraping goes on, one warning whose
    start and end are the first and last failed scrapes."""
    target = MetricsTarget("vllm", f"{server.url}/metrics", period_ms=50, timeout_ms=500)

    def err_a_while() -> None:
        server.failing = True
        time.sleep(0.4)
        server.failing = False

    result, rows = scrape_for(tmp_path, target, 1.6, during=err_a_while)
    failed = sorted(row["ts_ns"] for row in rows if row["metric"] == "up" and row["value"] == 0)
    assert len(failed) == result.failed >= 5
    down = next(r for r in rows if r["metric"] == "up" and r["value"] == 0)
    assert "503" in json.loads(down["labels"])["error"]
    at_failures = [row for row in rows if row["ts_ns"] in set(failed)]
    assert {row["metric"] for row in at_failures} == {"up"}  # a failed scrape: no other row
    assert max(row["ts_ns"] for row in rows if row["metric"] == "up") > failed[-1]  # went on
    (warning,) = result.warnings
    assert warning.code == WarningCode.SERVER_METRICS_GAP
    assert (warning.details["start_ns"], warning.details["end_ns"]) == (failed[0], failed[-1])
    assert warning.details["failed_scrapes"] == len(failed)


def test_a_dead_endpoint_leaves_an_open_gap_to_the_end(tmp_path: Path) -> None:
    server = MetricsServer()
    target = MetricsTarget("vllm", f"{server.url}/metrics", period_ms=50, timeout_ms=200)
    result, rows = scrape_for(tmp_path, target, 1.0, during=server.stop)
    (warning,) = result.warnings
    last_up = max(row["ts_ns"] for row in rows if row["metric"] == "up")
    assert warning.details["end_ns"] == last_up
    assert result.scrapes >= 3 and result.failed >= 3
    assert "refused" in warning.details["error"].lower()


def test_a_hung_endpoint_times_out_each_scrape(tmp_path: Path) -> None:
    """A port that accepts connections and never answers: every scrape ends at its timeout as
    a failed one (`up` 0, a timeout error), so the schedule goes on instead of hanging."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # connections queue in the backlog, unanswered
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
        target = MetricsTarget("hung", url, period_ms=100, timeout_ms=150)
        started = time.monotonic()
        result, rows = scrape_for(tmp_path, target, 1.0)
    # the 1 s window and at most one scrape's 150 ms timeout past it: 0.85 s of room for the
    # sampler's start and stop (tens of ms), which a machine twice as slow keeps
    assert time.monotonic() - started < 2.0
    assert result.scrapes == 0 and result.failed >= 4
    errors = {json.loads(row["labels"])["error"] for row in rows}
    assert all("timed out" in error for error in errors), errors
    (warning,) = result.warnings
    assert warning.details["failed_scrapes"] == result.failed

"""The `server_metrics` view on hand-made `server_samples` rows whose figures are known exactly:
vLLM (v0 gauges), SGLang (two engines: counts summed, fractions averaged) and TGI names mapped
to the common figures, a failed scrape kept as a gap, the client's completions and latency
between two scrapes, and the server panels under the report's timeline plot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import matplotlib.image
import pytest

from analysis.reports import plots
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder, rows_of
from tests.analysis.runs import BASE_NS

SCRAPE_NS = 100 * MS_NS
SCRAPES = 13  # BASE - 100 ms .. BASE + 1.1 s
FAILED = 5  # the scrape that failed (of service v)

Series = list[tuple[str, dict[str, str], Callable[[int], float]]]
SERVERS: dict[str, Series] = {
    "v": [
        ("vllm:num_requests_running", {"engine": "0"}, lambda k: k % 4),
        ("vllm:num_requests_waiting", {"engine": "0"}, lambda k: 2.0),
        ("vllm:gpu_cache_usage_perc", {"engine": "0"}, lambda k: 0.5),
        ("vllm:gpu_prefix_cache_hit_rate", {"engine": "0"}, lambda k: 0.25),
        ("vllm:time_to_first_token_seconds_sum", {}, lambda k: 3.0),  # not mapped
    ],
    "s": [
        ("sglang:num_running_reqs", {"tp_rank": "0"}, lambda k: 2.0),
        ("sglang:num_running_reqs", {"tp_rank": "1"}, lambda k: 3.0),
        ("sglang:num_queue_reqs", {"tp_rank": "0"}, lambda k: 1.0),
        ("sglang:token_usage", {"tp_rank": "0"}, lambda k: 0.2),
        ("sglang:token_usage", {"tp_rank": "1"}, lambda k: 0.4),
        ("sglang:cache_hit_rate", {"tp_rank": "0"}, lambda k: 0.75),
    ],
    "t": [
        ("tgi_batch_current_size", {}, lambda k: 6.0),
        ("tgi_queue_size", {}, lambda k: 9.0),
    ],
}


def scraped_run(
    root: Path, run_id: str = "20260105-000000-scraped", with_scrapes: bool = True
) -> RunBuilder:
    """Pipeline p: 10 ok queries 100 ms apart from BASE, each taking 100 ms (completions at
    BASE + 100 ms .. BASE + 1 s). Three services scraped every 100 ms from BASE - 100 ms; v's
    scrape 5 failed."""
    run = RunBuilder(root, run_id, {"p": "server"})
    run.uniform_queries(0, "collocated", "p", 10, SECOND_NS, BASE_NS)
    run.add("host_samples", 0, "collocated", None, ts_ns=BASE_NS, scope="host", cpu_util=1.0)
    up: Series = [("up", {}, lambda k: 1.0)]
    for service, series in SERVERS.items() if with_scrapes else ():
        for k in range(SCRAPES):
            ts = BASE_NS - SCRAPE_NS + k * SCRAPE_NS
            if service == "v" and k == FAILED:
                labels = json.dumps({"error": "URLError: refused"})
                run.add("server_samples", 0, "collocated", None, ts_ns=ts, service=service,
                        metric="up", labels=labels, value=0.0)  # fmt: skip
                continue
            for metric, labels_of, value in series + up:
                run.add("server_samples", 0, "collocated", None, ts_ns=ts, service=service,
                        metric=metric, labels=json.dumps(labels_of), value=value(k))  # fmt: skip
    return run


def test_the_servers_names_map_to_the_common_figures(tmp_path: Path, db_path: Path) -> None:
    load_runs([scraped_run(tmp_path).write()], db_path)
    rows = rows_of(db_path, "SELECT * FROM server_metrics ORDER BY service, ts_ns")
    by = {(row["service"], (row["ts_ns"] - BASE_NS) // SCRAPE_NS + 1): row for row in rows}
    assert len(rows) == 3 * SCRAPES
    v = by["v", 3]
    assert (v["server"], v["requests_running"], v["requests_waiting"]) == ("vllm", 3, 2)
    assert (v["kv_cache_usage"], v["prefix_cache_hit_rate"], v["batch_size"]) == (0.5, 0.25, None)
    s = by["s", 3]
    assert (s["server"], s["requests_running"], s["requests_waiting"]) == ("sglang", 5, 1)
    assert s["kv_cache_usage"] == pytest.approx(0.3) and s["prefix_cache_hit_rate"] == 0.75
    t = by["t", 3]
    assert (t["server"], t["requests_running"], t["batch_size"], t["requests_waiting"]) == (
        "tgi", 6, 6, 9,
    )  # fmt: skip
    assert t["kv_cache_usage"] is None
    gap = by["v", FAILED]
    assert gap["up"] is False and gap["scrape_error"] == "URLError: refused"
    assert gap["requests_running"] is None and gap["server"] is None
    assert all(row["up"] for row in rows if row is not gap)


def test_the_clients_latency_between_scrapes(tmp_path: Path, db_path: Path) -> None:
    """Completions at BASE + 100 ms .. BASE + 1 s, scrapes at BASE - 100 ms + k * 100 ms: scrape
    k (from 2 to 11) sees exactly one completion, of 100 ms; the window is BASE .. BASE + 1 s."""
    load_runs([scraped_run(tmp_path).write()], db_path)
    rows = rows_of(
        db_path,
        "SELECT ts_ns, in_window, client_completed, client_latency_p50_ms, client_latency_max_ms "
        "FROM server_metrics WHERE service = 't' ORDER BY ts_ns",
    )
    assert [row["client_completed"] for row in rows] == [0, 0] + [1] * 10 + [0]
    assert {row["client_latency_p50_ms"] for row in rows[2:12]} == {100.0}
    assert {row["client_latency_max_ms"] for row in rows[2:12]} == {100.0}
    assert [row["in_window"] for row in rows] == [False] + [True] * 11 + [False]
    # The failed scrape of v is no boundary of its own for v: the next one counts from it.
    v = rows_of(db_path, "SELECT client_completed FROM server_metrics WHERE service = 'v' "
                "ORDER BY ts_ns")  # fmt: skip
    assert sum(row["client_completed"] for row in v) == 10


@pytest.mark.slow
def test_server_panels_join_the_timeline_plot(tmp_path: Path, db_path: Path) -> None:
    """A run with scrapes gets three more panels under the timeline (a taller figure)."""
    load_runs([scraped_run(tmp_path / "a").write()], db_path)
    plain = scraped_run(tmp_path / "b", "20260105-000001-plain", with_scrapes=False)
    load_runs([plain.write()], db_path)
    connection = connect_read_only(db_path)
    try:
        scrapes = plots.server_timeline(connection, "20260105-000000-scraped", BASE_NS)
        with_panels = plots.plot_timeline(connection, "20260105-000000-scraped", tmp_path / "s.png")
        without = plots.plot_timeline(connection, plain.run_id, tmp_path / "p.png")
    finally:
        connection.close()
    assert with_panels is not None and without is not None
    assert set(scrapes["service"]) == {"v", "s", "t"}
    assert scrapes["kv_cache_usage_pct"].dropna().max() == pytest.approx(50.0)
    tall, short = (matplotlib.image.imread(path).shape[0] for path in (with_panels, without))
    assert tall > 1.6 * short

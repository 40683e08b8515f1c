"""The Perfetto / Chrome trace of a synthesised run: tracks, slices, flows, operator spans and
counters have the known counts, slices nest per thread, every flow has both ends, and big runs
are capped with the cap named in the metadata."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from analysis.reports.trace import write_trace
from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder

T0 = 5_000 * SECOND_NS


def _visit(
    run: RunBuilder,
    phase: str,
    pipeline: str,
    query_id: int,
    stage: str,
    visit: int,
    start_ns: int,
    end_ns: int,
    status: str = "ok",
) -> None:
    run.add(
        "stage_events",
        0,
        phase,
        pipeline,
        query_id=query_id,
        stage=stage,
        visit=visit,
        enqueued_ns=start_ns - MS_NS // 2,
        started_ns=start_ns,
        finished_ns=end_ns,
        status=status,
    )


def traced_run(root: Path) -> RunBuilder:
    """Pipeline a (solo): queries 0 (warm-up) to 3 through stages s1 -> s2; query 2 visits s2
    twice (a loop); query 3's s1 visit overlaps query 2's (a second s1 lane). 9 visits, 5 flow
    hops. Query 1's s2 visit was profiled: a window span with conv (containing a child op) and
    relu on the CPU, and one CUDA kernel. Pipeline b (collocated): one visit of query 0.
    Counters: gpu 0 with 3 samples (power, sm, mem util), host with 4 samples of CPU and a
    cumulative RAPL energy (3 power slopes), pipeline a's worker process with 2 CPU samples."""
    run = RunBuilder(root, "20260301-000000-trace", {"a": "server", "b": "server"})
    for query_id in range(4):
        scheduled = T0 + query_id * 10 * MS_NS
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=query_id,
            scheduled_ns=scheduled,
            issued_ns=scheduled,
            completed_ns=scheduled + 9 * MS_NS,
            status="ok",
            samples=1,
            warmup=query_id == 0,
        )
    for query_id in (0, 1):
        base = T0 + query_id * 10 * MS_NS
        _visit(run, "solo", "a", query_id, "s1", 0, base + MS_NS, base + 2 * MS_NS)
        _visit(run, "solo", "a", query_id, "s2", 0, base + 3 * MS_NS, base + 6 * MS_NS)
    base = T0 + 20 * MS_NS
    _visit(run, "solo", "a", 2, "s1", 0, base + MS_NS, base + 4 * MS_NS)
    _visit(run, "solo", "a", 2, "s2", 0, base + 5 * MS_NS, base + 6 * MS_NS)
    _visit(run, "solo", "a", 2, "s2", 1, base + 7 * MS_NS, base + 8 * MS_NS, status="error")
    _visit(run, "solo", "a", 3, "s1", 0, base + 2 * MS_NS, base + 3 * MS_NS)  # overlaps q2's s1
    _visit(run, "solo", "a", 3, "s2", 0, base + 9 * MS_NS, base + 10 * MS_NS)
    run.add(
        "queries",
        0,
        "collocated",
        "b",
        query_id=0,
        scheduled_ns=T0 + SECOND_NS,
        issued_ns=T0 + SECOND_NS,
        completed_ns=T0 + SECOND_NS + MS_NS,
        status="ok",
        samples=1,
        warmup=False,
    )
    _visit(run, "collocated", "b", 0, "only", 0, T0 + SECOND_NS, T0 + SECOND_NS + MS_NS)
    visit_start = T0 + 10 * MS_NS + 3 * MS_NS  # query 1's s2 visit: [13, 16] ms
    spans = [
        ("[profiler window]", 0, 3000, "window"),
        ("aten::conv2d", 100, 1000, "cpu"),
        ("aten::convolution", 200, 900, "cpu"),
        ("aten::relu", 1200, 1500, "cpu"),
        ("kernel", 800, 1600, "cuda"),  # overlaps conv and relu, on its own thread
    ]
    for operator, start_us, end_us, device in spans:
        run.add(
            "operator_spans",
            0,
            "solo",
            "a",
            query_id=1,
            stage="s2",
            visit=0,
            operator=operator,
            start_ns=visit_start + start_us * 1000,
            end_ns=visit_start + end_us * 1000,
            device_type=device,
            device_index=0 if device == "cuda" else None,
            thread_id=1,
        )
    for index in range(3):
        run.add(
            "gpu_samples",
            0,
            "solo",
            None,
            ts_ns=T0 + index * SECOND_NS,
            gpu=0,
            power_w=100.0 + index,
            energy_j=None,
            energy_source=None,
            sm_util=50.0,
            mem_util=10.0,
        )
    for index, energy in enumerate([0.0, 10.0, 30.0, 60.0]):
        run.add(
            "host_samples",
            0,
            "solo",
            None,
            ts_ns=T0 + index * SECOND_NS,
            scope="host",
            cpu_util=25.0,
            energy_j=energy,
            energy_source="rapl",
        )
    for index in range(2):
        run.add(
            "host_samples",
            0,
            "solo",
            "a",
            ts_ns=T0 + index * SECOND_NS,
            scope="process",
            pid=42,
            cpu_util=90.0,
        )
    return run


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One traced run, loaded and written once for the module's readers (2-3 s each)."""
    folder = tmp_path_factory.mktemp("trace")
    db_path = folder / "warehouse" / "results.duckdb"
    load_runs([traced_run(folder).write()], db_path)
    return write_trace(db_path, out_dir=folder / "out").path


def _events(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    trace = json.loads(path.read_text(encoding="utf-8"))
    return trace, trace["traceEvents"]


def _names(events: list[dict[str, Any]]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    return processes, threads


def test_tracks_slices_and_args(trace_file: Path) -> None:
    trace, events = _events(trace_file)
    processes, threads = _names(events)
    assert sorted(processes.values()) == ["a · solo", "b · collocated", "host and devices"]
    per_thread = Counter(
        (processes[e["pid"]], threads[(e["pid"], e["tid"])])
        for e in events
        if e["ph"] == "X" and e["cat"].startswith("stage")
    )
    assert per_thread == {
        ("a · solo", "s1"): 3,
        ("a · solo", "s1 #2"): 1,  # query 3's visit overlaps query 2's: its own lane
        ("a · solo", "s2"): 5,
        ("b · collocated", "only"): 1,
    }
    (looped,) = [
        e for e in events if e["ph"] == "X" and e["name"] == "q2" and e["args"].get("visit") == 1
    ]
    # Microseconds of the run's monotonic clock, exactly.
    assert looped["ts"] == (T0 + 27 * MS_NS) / 1000 and looped["dur"] == 1000.0
    assert looped["args"]["status"] == "error" and looped["args"]["query_id"] == 2
    assert looped["args"]["queue_wait_ms"] == pytest.approx(0.5)
    warm = [e for e in events if e["ph"] == "X" and e["name"] == "q0" and "warmup" in e["args"]]
    assert {e["args"]["warmup"] for e in warm} == {True, False}  # a's q0 is warm-up, b's not
    assert trace["otherData"]["capped"] == [] and trace["otherData"]["slices"] == 10


def test_every_flow_has_both_ends_inside_slices(trace_file: Path) -> None:
    _, events = _events(trace_file)
    slices = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    ends: dict[int, list[str]] = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f"):
            ends[e["id"]].append(e["ph"])
            assert any(start <= e["ts"] <= end for start, end in slices[(e["pid"], e["tid"])])
            if e["ph"] == "f":
                assert e["bp"] == "e"
    assert len(ends) == 5  # 1 + 1 + 2 + 1 hops along queries 0-3; b's single visit has none
    assert all(sorted(kinds) == ["f", "s"] for kinds in ends.values())


def test_slices_nest_within_each_thread(trace_file: Path) -> None:
    _, events = _events(trace_file)
    by_thread = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], -e["dur"]))
    assert by_thread  # no slices would pass the loop below vacuously
    for spans in by_thread.values():
        open_ends: list[float] = []
        for start, negative in sorted(spans):
            end = start - negative
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], "slices overlap without nesting"
            open_ends.append(end)


def test_operator_spans_and_counters(trace_file: Path) -> None:
    _, events = _events(trace_file)
    processes, threads = _names(events)
    operators = Counter(
        threads[(e["pid"], e["tid"])]
        for e in events
        if e["ph"] == "X" and e["cat"].startswith("operator")
    )
    assert operators == {"s2 · operators (cpu)": 4, "s2 · operators (cuda:0)": 1}
    counters = Counter((processes[e["pid"]], e["name"]) for e in events if e["ph"] == "C")
    assert counters == {
        ("host and devices", "gpu0 power_w"): 3,
        ("host and devices", "gpu0 sm_util_pct"): 3,
        ("host and devices", "gpu0 mem_util_pct"): 3,
        ("host and devices", "host cpu_util_pct"): 4,
        ("host and devices", "host power_w (rapl)"): 3,
        ("a · solo", "cpu_util_pct"): 2,
    }
    power = [e["args"]["value"] for e in events if e.get("name") == "host power_w (rapl)"]
    assert power == [10.0, 20.0, 30.0]  # slopes of 0, 10, 30, 60 J one second apart


def test_big_runs_are_capped_and_say_so(tmp_path: Path, db_path: Path) -> None:
    load_runs([traced_run(tmp_path).write()], db_path)
    summary = write_trace(db_path, out_dir=tmp_path / "capped", max_queries=2)
    trace, events = _events(summary.path)
    assert summary.slices == 5 and summary.flows == 2 and summary.capped_tracks == 1
    assert trace["otherData"]["max_queries_per_track"] == 2
    assert trace["otherData"]["capped"] == [
        {
            "pipeline": "a",
            "phase": "solo",
            "trial": 0,
            "queries": 4,
            "kept": 2,
            "last_kept_query_id": 1,
        }
    ]
    assert {e["name"] for e in events if e["ph"] == "X" and e["cat"].startswith("stage")} == {
        "q0",
        "q1",
    }


def test_trace_beside_the_run_by_default(tmp_path: Path, db_path: Path) -> None:
    run = traced_run(tmp_path)
    load_runs([run.write()], db_path)
    assert write_trace(db_path, run.run_id).path == run.run_dir / "trace.json"

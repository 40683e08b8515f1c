"""host_load: the CPU in use during each load window, split into the benchmark's workers, the
harness and whatever else ran (finding 8, analysis side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from stages.rundir.tables import ChunkWriter
from stages.telemetry.host_sampler import HostSampler
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder, rows_of
from tests.analysis.runs import BASE_NS

TEN_S = 10 * SECOND_NS


def with_logical_cores(run_dir: Path, logical_cores: int) -> Path:
    """Add the environment section's core count to a built run's manifest, as the launcher
    writes it (environment.cpu.logical_cores)."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["environment"] = {"cpu": {"logical_cores": logical_cores}}
    path.write_text(json.dumps(manifest))
    return run_dir


def ticks(
    run: RunBuilder,
    phase: str,
    first_ns: int,
    last_ns: int,
    host: float,
    workers: dict[str, float],
    harness: float | None,
) -> None:
    """One host sampler tick a second from first_ns to last_ns: a host row (percent of all
    cores), one process row per pipeline and a harness row (percent of one core)."""
    for ts in range(first_ns, last_ns + 1, SECOND_NS):
        run.add("host_samples", 0, phase, None, ts_ns=ts, scope="host", cpu_util=host)
        for pipeline, util in workers.items():
            run.add(
                "host_samples", 0, phase, pipeline, ts_ns=ts, scope="process", pid=10, cpu_util=util
            )
        if harness is not None:
            run.add(
                "host_samples", 0, phase, None, ts_ns=ts, scope="harness", pid=1, cpu_util=harness
            )


def test_foreign_cpu_is_host_minus_workers_minus_harness(tmp_path: Path, db_path: Path) -> None:
    """On 2 logical cores: solo a's window [0, 10] s has the host 75% busy (1.5 cores), a at
    100% of a core and the harness at 10%: 0.4 core foreign, a warning. The collocated window
    [20, 30] s: host 70% (1.4), a and b 60% each (1.2 summed per tick), harness 0.1: 0.1 core
    foreign, no warning. Solo b's window [40, 50] s has no harness rows: foreign unknown.
    Ticks just outside each window (and idle-baseline ticks before everything) are far busier
    and must not count."""
    run = RunBuilder(tmp_path, "20260203-000000-load", {"a": "server", "b": "server"})
    solo_a, together, solo_b = BASE_NS, BASE_NS + 20 * SECOND_NS, BASE_NS + 40 * SECOND_NS
    run.uniform_queries(0, "solo", "a", 100, TEN_S, start_ns=solo_a)
    run.uniform_queries(0, "collocated", "a", 100, TEN_S, start_ns=together)
    run.uniform_queries(0, "collocated", "b", 100, TEN_S, start_ns=together)
    run.uniform_queries(0, "solo", "b", 100, TEN_S, start_ns=solo_b)
    ticks(run, "idle", BASE_NS - 9 * SECOND_NS, BASE_NS - 5 * SECOND_NS, 100.0, {}, 90.0)
    for start_ns, phase, host, workers, harness in (
        (solo_a, "solo", 75.0, {"a": 100.0}, 10.0),
        (together, "collocated", 70.0, {"a": 60.0, "b": 60.0}, 10.0),
        (solo_b, "solo", 50.0, {"b": 80.0}, None),
    ):
        ticks(run, phase, start_ns, start_ns + TEN_S, host, workers, harness)
        outside = {name: 200.0 for name in workers}
        ticks(run, phase, start_ns - 2 * SECOND_NS, start_ns - SECOND_NS, 100.0, outside, 90.0)
        ticks(run, phase, start_ns + TEN_S + MS_NS, start_ns + TEN_S + MS_NS, 100.0, outside, 90.0)
    load_runs([with_logical_cores(run.write(), 2)], db_path)

    found = {
        (row["phase"], row["pipeline"]): row for row in rows_of(db_path, "SELECT * FROM host_load")
    }
    assert set(found) == {("solo", "a"), ("solo", "b"), ("collocated", None)}
    a = found[("solo", "a")]
    assert (a["samples"], a["logical_cores"]) == (11, 2)
    assert a["window_start_ns"] == solo_a and a["window_end_ns"] == solo_a + TEN_S
    assert a["host_cpu_cores"] == pytest.approx(1.5)
    assert a["workers_cpu_cores"] == pytest.approx(1.0)
    assert a["harness_cpu_cores"] == pytest.approx(0.1)
    assert a["foreign_cpu_cores"] == pytest.approx(0.4)
    assert a["foreign_cpu_warning"] is True
    both = found[("collocated", None)]
    assert both["workers_cpu_cores"] == pytest.approx(1.2)
    assert both["foreign_cpu_cores"] == pytest.approx(0.1)
    assert both["foreign_cpu_warning"] is False
    b = found[("solo", "b")]
    assert b["host_cpu_cores"] == pytest.approx(1.0)
    assert b["workers_cpu_cores"] == pytest.approx(0.8)  # b's own rows only, not a's
    assert b["harness_cpu_cores"] is None
    assert b["foreign_cpu_cores"] is None and b["foreign_cpu_warning"] is None


def test_host_cores_need_the_manifest_core_count(tmp_path: Path, db_path: Path) -> None:
    """Without environment.cpu.logical_cores the host share cannot become cores: NULL."""
    run = RunBuilder(tmp_path, "20260203-000001-nocores", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 10, TEN_S, start_ns=BASE_NS)
    ticks(run, "solo", BASE_NS, BASE_NS + TEN_S, 50.0, {"a": 50.0}, 5.0)
    load_runs([run.write()], db_path)
    (row,) = rows_of(db_path, "SELECT * FROM host_load")
    assert row["logical_cores"] is None and row["host_cpu_cores"] is None
    assert row["workers_cpu_cores"] == pytest.approx(0.5)
    assert row["foreign_cpu_cores"] is None


@pytest.mark.spawns
@pytest.mark.serial  # a spinning thread's share of a core: alone, not beside another test
def test_real_host_sampler_rows_give_cores(tmp_path: Path, db_path: Path) -> None:
    """The real HostSampler, 100 ms ticks over a child spinning on one core for ~1.2 s: its
    process rows read as up to one core and the host's (which includes it) as at least that,
    once both are in cores (host percent of all cores times the manifest's core count)."""
    run = RunBuilder(tmp_path, "20260203-000002-real", {"spin": "server"})
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        keys = {"run_id": run.run_id, "trial": 0, "phase": "solo", "pipeline": None}
        writer = ChunkWriter(run.run_dir, "host_samples", "host", keys)
        sampler = HostSampler(writer, {"spin": child.pid})
        sampler.sample()
        time.sleep(0.2)  # the first tick only sets baselines; the window opens after it
        start_ns = time.monotonic_ns()
        while time.monotonic_ns() - start_ns < 1_200 * MS_NS:
            time.sleep(0.1)
            sampler.sample()
        end_ns = time.monotonic_ns()
        sampler.close()
    finally:
        child.kill()
        child.wait()
    run.add(
        "queries",
        0,
        "solo",
        "spin",
        query_id=0,
        scheduled_ns=start_ns,
        issued_ns=start_ns,
        completed_ns=end_ns,
        status="ok",
        samples=1,
        warmup=False,
    )
    load_runs([with_logical_cores(run.write(), os.cpu_count() or 1)], db_path)
    (row,) = rows_of(db_path, "SELECT * FROM host_load")
    assert row["samples"] >= 10
    assert 0.2 < row["workers_cpu_cores"] <= 1.1  # one spinning thread, shared machine
    assert row["host_cpu_cores"] >= row["workers_cpu_cores"] - 0.15  # host includes it

"""Services in the energy and host-load views: a server the benchmark started (host rows of
scope 'service', GPU process rows named after it or carrying its pid) is a consumer of its
own in `energy_split`, in every window it was sampled in, and its CPU is not foreign load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import SECOND_NS, RunBuilder, rows_of
from tests.analysis.runs import BASE_NS, collocated_run


def _process(
    run: RunBuilder, phase: str, name: str, scope: str, ts: int, pid: int, cpu: float
) -> None:
    pipeline = None if scope == "harness" else name
    run.add("host_samples", 0, phase, pipeline, ts_ns=ts, scope=scope, pid=pid, cpu_util=cpu)


def service_run(root: Path) -> Path:
    """collocated_run (collocated window [40, 50] s: host 41.25 J, GPU 0 200 J; solo a [0, 10] s:
    24.25 J; solo b [20, 30] s: 33.75 J) with a service `llm` (server pid 300) up throughout,
    samples every second inside the windows:
      host, collocated: a 150 %, b 50 %, harness 50 %, llm 150 % -> 0.375 / 0.125 / 0.125 /
        0.375 of 41.25 J;
      GPU 0, collocated: a's pid 101 sm 30; llm's server pid 300 (pipeline NULL: matched by its
        'service' host rows) sm 10 and its descendant 302 (named 'llm' by the sampler) sm 10;
        foreign pid 999 sm 10 -> a 0.5, llm 1/3, other 1/6 of 200 J; service `gpu_only`
        (named in the manifest's spec only: no host rows) pid 400 sm 0 -> its row, share 0;
      host, solo a: a 100 %, llm 100 % -> 0.5 / 0.5 of 24.25 J;
      host, solo b: llm 50 % only (b has no process rows) -> b 0, llm 1 of 33.75 J.
    The manifest records 2 logical cores (host rows: 50 % of all cores = 1 core)."""
    run = collocated_run(root)
    together = BASE_NS + 40 * SECOND_NS
    for tick in range(1, 10):
        ts = together + tick * SECOND_NS
        uses = ((101, "a", 30.0), (300, None, 10.0), (302, "llm", 10.0), (400, "gpu_only", 0.0))
        for pid, pipeline, util in uses:
            run.add(
                "gpu_process_samples",
                0,
                "collocated",
                pipeline,
                ts_ns=ts,
                gpu=0,
                pid=pid,
                sm_util=util,
            )
        run.add(
            "gpu_process_samples", 0, "collocated", None, ts_ns=ts, gpu=0, pid=999, sm_util=10.0
        )
        _process(run, "collocated", "a", "process", ts, 101, 150.0)
        _process(run, "collocated", "b", "process", ts, 102, 50.0)
        _process(run, "collocated", "", "harness", ts, 1, 50.0)
        _process(run, "collocated", "llm", "service", ts, 300, 150.0)
        solo_a = BASE_NS + tick * SECOND_NS
        _process(run, "solo", "a", "process", solo_a, 201, 100.0)
        _process(run, "solo", "llm", "service", solo_a, 300, 100.0)
        _process(run, "solo", "llm", "service", solo_a + 20 * SECOND_NS, 300, 50.0)
    run_dir = run.write()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["environment"] = {"cpu": {"logical_cores": 2}}
    manifest["spec"]["services"] = [{"name": "llm"}, {"name": "gpu_only"}]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


@pytest.mark.slow
def test_energy_split_gives_a_service_its_own_rows(tmp_path: Path, db_path: Path) -> None:
    load_runs([service_run(tmp_path)], db_path)
    rows = rows_of(db_path, "SELECT * FROM energy_split")
    got = {
        (r["phase"], r["window_start_ns"], r["device"], r["pipeline"], r["consumer"]): (
            r["share"],
            r["energy_j"],
        )
        for r in rows
    }
    approx = pytest.approx
    collocated = BASE_NS + 40 * SECOND_NS
    solo_a, solo_b = BASE_NS, BASE_NS + 20 * SECOND_NS
    assert got == {
        ("collocated", collocated, "gpu:0", "a", "pipeline"): approx((0.5, 100.0)),
        ("collocated", collocated, "gpu:0", "b", "pipeline"): approx((0.0, 0.0)),
        ("collocated", collocated, "gpu:0", "llm", "service"): approx((1 / 3, 200 / 3)),
        ("collocated", collocated, "gpu:0", None, "other"): approx((1 / 6, 100 / 3)),
        ("collocated", collocated, "gpu:0", "gpu_only", "service"): approx((0.0, 0.0)),
        ("collocated", collocated, "host", "a", "pipeline"): approx((0.375, 41.25 * 0.375)),
        ("collocated", collocated, "host", "b", "pipeline"): approx((0.125, 41.25 * 0.125)),
        ("collocated", collocated, "host", "llm", "service"): approx((0.375, 41.25 * 0.375)),
        ("collocated", collocated, "host", None, "other"): approx((0.125, 41.25 * 0.125)),
        ("solo", solo_a, "host", "a", "pipeline"): approx((0.5, 24.25 / 2)),
        ("solo", solo_a, "host", "llm", "service"): approx((0.5, 24.25 / 2)),
        ("solo", solo_b, "host", "b", "pipeline"): approx((0.0, 0.0)),
        ("solo", solo_b, "host", "llm", "service"): approx((1.0, 33.75)),
    }
    sums = rows_of(
        db_path,
        "SELECT sum(energy_j) AS split_j, any_value(total_energy_j) AS total_j "
        "FROM energy_split GROUP BY phase, device, window_start_ns",
    )
    for window in sums:
        assert window["split_j"] == approx(window["total_j"])


def test_a_services_cpu_is_not_foreign_load(tmp_path: Path, db_path: Path) -> None:
    """Collocated: host 1 core, a + b 2 cores, harness 0.5, llm 1.5 cores: foreign 1 - 2 -
    0.5 - 1.5 = -3 (the synthetic host row is low; what matters is that llm is subtracted)."""
    load_runs([service_run(tmp_path)], db_path)
    rows = {(r["phase"], r["pipeline"]): r for r in rows_of(db_path, "SELECT * FROM host_load")}
    collocated = rows[("collocated", None)]
    assert collocated["services_cpu_cores"] == pytest.approx(1.5)
    assert collocated["foreign_cpu_cores"] == pytest.approx(1.0 - 2.0 - 0.5 - 1.5)
    assert rows[("solo", "b")]["services_cpu_cores"] == pytest.approx(0.5)

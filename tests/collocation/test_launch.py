"""Collocated runs end to end: run directory, phases, telemetry, fault containment, signals."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from stages.collocation.launcher import LaunchError, ProgressEvent
from stages.rundir.tables import read_table
from stages.validation.loading import validate_document
from tests.helpers import REPO, run, spec_doc
from tests.noop_run import NoopCollocatedRun

KEYS = ("run_id", "trial", "phase", "pipeline")


def collobench(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.spawns
@pytest.mark.slow
def test_noop_collocated_writes_a_complete_run_directory(
    noop_collocated_run: NoopCollocatedRun,
) -> None:
    """`collobench run specs/noop_collocated.yaml`, 1 s per pipeline (the session's shared run,
    recorded in MLflow and loaded into its warehouse)."""
    completed = noop_collocated_run.completed
    assert completed.returncode == 0, completed.stderr
    run_dir = noop_collocated_run.run_dir
    assert not (run_dir / "parts").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert manifest["run_id"] == run_dir.name
    assert len(manifest["spec_hash"]) == 64
    assert manifest["spec"]["pipelines"][0]["loadgen"]["duration_s"] == 1
    assert manifest["environment"]["python"]
    assert {(r["phase"], r["pipeline"], r["status"]) for r in manifest["results"]} == {
        ("solo", "front", "ok"),
        ("solo", "back", "ok"),
        ("collocated", "front", "ok"),
        ("collocated", "back", "ok"),
    }
    queries = read_table(run_dir, "queries").to_pandas()
    assert set(zip(queries.phase, queries.pipeline, strict=True)) == {
        ("solo", "front"),
        ("solo", "back"),
        ("collocated", "front"),
        ("collocated", "back"),
    }
    assert queries[list(KEYS)].notna().all().all()
    assert (queries.run_id == run_dir.name).all()
    ok = queries[queries.status == "ok"]
    assert (ok.completed_ns >= ok.scheduled_ns).all()
    events = read_table(run_dir, "stage_events").to_pandas()
    assert set(events.stage) == {"parse", "answer", "work"}
    host = read_table(run_dir, "host_samples").to_pandas()
    assert {"host", "process"} <= set(host.scope)
    per_process = host[host.scope == "process"]
    assert set(zip(per_process.phase, per_process.pipeline, strict=True)) >= {
        ("collocated", "front"),
        ("collocated", "back"),
    }
    # Collocated pipelines started at one instant: the barrier.
    collocated = queries[queries.phase == "collocated"]
    first = collocated.groupby("pipeline").scheduled_ns.min()
    assert abs(int(first["front"]) - int(first["back"])) < 5_000_000
    assert "mlflow run:" in completed.stdout
    # Finding 9: the console's phase lines, the manifest and the warehouse's views agree (they
    # are one computation; MLflow logs the manifest's figures, see test_mlflow_log).
    import duckdb

    db = duckdb.connect(str(noop_collocated_run.db), True)
    views = {
        (trial, phase, pipeline): (ok, measured, p99)
        for trial, phase, pipeline, ok, measured, p99 in db.execute(
            "SELECT trial, phase, pipeline, ok_queries, measured_queries, latency_p99_ms "
            "FROM latency WHERE run_id = ?",
            [run_dir.name],
        ).fetchall()
    }
    db.close()
    assert len(views) == 4
    for result in manifest["results"]:
        figures = result["summary"]
        ok, measured, p99 = views[(result["trial"], result["phase"], result["pipeline"])]
        assert (figures["queries_ok"], figures["queries_measured"]) == (ok, measured)
        assert figures["latency_p99_ms"] == pytest.approx(p99, rel=1e-12)
        assert f"{result['pipeline']}: ok, {ok} ok of {measured} measured" in completed.stdout


def outcome(result: Any, name: str) -> Any:
    (found,) = [o for o in result.results if o.pipeline == name]
    return found


def assert_survivor_kept(result: Any) -> None:
    survivor = outcome(result, "survivor")
    assert survivor.status == "ok"
    queries = read_table(result.run_dir, "queries").to_pandas()
    assert (queries[queries.pipeline == "survivor"].status == "ok").sum() >= 250


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("exit", "failed", "worker exited with code 3 before reporting"),
        ("segfault", "failed", "worker killed by SIGSEGV"),
    ],
)
@pytest.mark.slow
def test_a_crashing_worker_is_contained(
    tmp_path: Path, mode: str, status: str, reason: str
) -> None:
    doc = spec_doc({"type": "fail", "config": {"at_query": 200, "mode": mode}})
    result = run(doc, tmp_path)
    victim = outcome(result, "victim")
    assert (victim.status, victim.error) == (status, reason)
    assert result.status == "failed"
    assert_survivor_kept(result)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert any(r["pipeline"] == "victim" and r["error"] == reason for r in manifest["results"])


@pytest.mark.spawns
@pytest.mark.slow
def test_raising_stage_marks_errors_and_the_budget_fails_the_pipeline(tmp_path: Path) -> None:
    doc = spec_doc({"type": "fail", "config": {"every": 2}})
    doc["pipelines"][0]["error_budget"] = 20
    result = run(doc, tmp_path)
    victim = outcome(result, "victim")
    assert victim.status == "failed"
    assert victim.error == (
        "error budget exhausted: 20 failed queries "
        "(most often bad: InjectedFailureError: injected failure)"
    )
    assert victim.counters.errors == 20 and victim.counters.ok >= 19
    errors = read_table(result.run_dir, "errors").to_pylist()
    assert [(e["pipeline"], e["stage"], e["count"]) for e in errors] == [("victim", "bad", 20)]
    assert_survivor_kept(result)


@pytest.mark.spawns
@pytest.mark.slow
def test_a_hung_stage_ends_in_timeout(tmp_path: Path) -> None:
    doc = spec_doc({"type": "fail", "config": {"at_query": 5, "mode": "hang"}}, timeout_s=2)
    result = run(doc, tmp_path)
    victim = outcome(result, "victim")
    assert victim.status == "timeout"
    assert victim.counters.timeouts == 1
    queries = read_table(result.run_dir, "queries").to_pandas()
    mine = queries[queries.pipeline == "victim"].set_index("query_id")
    assert mine.loc[5, "status"] == "timeout"
    assert_survivor_kept(result)


@pytest.mark.spawns
@pytest.mark.slow
def test_a_killed_worker_is_contained(tmp_path: Path) -> None:
    doc = spec_doc({"type": "sleep", "config": {"ms": 1}}, duration_s=5)
    killed: list[int] = []

    def kill_victim(event: ProgressEvent) -> None:
        pid = event.data.get("pid")
        if event.kind == "progress" and event.pipeline == "victim" and pid and not killed:
            first_issue_ns = event.data.get("first_issue_ns") or time.monotonic_ns()
            if time.monotonic_ns() - first_issue_ns > 1.6e9:  # after the first 1 s flush
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    result = run(doc, tmp_path, progress=kill_victim)
    assert killed
    victim = outcome(result, "victim")
    assert victim.status == "failed"
    assert victim.error == "worker killed by SIGKILL (possibly the OOM killer)"
    queries = read_table(result.run_dir, "queries").to_pandas()
    assert (queries[queries.pipeline == "victim"].status == "ok").sum() > 0  # flushed rows kept
    assert_survivor_kept(result)


def start_long_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, list[psutil.Process]]:
    """A CLI run of two 60 s pipelines, returned once both have flushed rows to disk twice
    (the first hand-off can hold a single row: a stage thread's flush deadline may have passed
    while it waited for the window to open)."""
    spec = tmp_path / "long.yaml"
    doc = spec_doc({"type": "sleep", "config": {"ms": 1}}, duration_s=60, timeout_s=90)
    doc["pipelines"][1]["loadgen"]["duration_s"] = 60
    spec.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stages.cli",
            "run",
            str(spec),
            "--out",
            str(out),
            "--no-mlflow",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        chunks = list(out.glob("*/parts/queries/*.parquet"))
        per_pipeline = collections.Counter(path.name.split("-")[2] for path in chunks)
        if len(per_pipeline) >= 2 and min(per_pipeline.values()) >= 2:
            break  # both pipelines have flushed rows twice
        time.sleep(0.2)
    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) >= 3  # two workers and the host sampler
    return process, out, children


@pytest.mark.spawns
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_interrupting_the_launcher_leaves_no_orphans(tmp_path: Path, sig: int) -> None:
    process, out, children = start_long_run(tmp_path)
    try:
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted; kept what was measured" in stderr
    _gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.pid for p in alive]
    (run_dir,) = out.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    queries = read_table(run_dir, "queries").to_pandas()
    assert set(queries.pipeline) == {"victim", "survivor"}
    assert {r["status"] for r in manifest["results"]} <= {"interrupted", "failed"}


@pytest.mark.spawns
def test_gpu_spec_without_a_gpu_is_refused_with_exit_2(tmp_path: Path) -> None:
    doc = spec_doc({"type": "noop"})
    doc["pipelines"][0]["device"] = "cuda"
    spec = tmp_path / "gpu.yaml"
    spec.write_text(yaml.safe_dump(doc))
    completed = collobench("run", str(spec), "--out", str(tmp_path / "out"))
    assert completed.returncode == 2
    assert "no NVIDIA GPU is visible" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "out").exists()


def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **device: Any) -> None:
    """One scripted GPU (fake NVML) for the spawned samplers of this test."""
    script = tmp_path / "gpu.json"
    script.write_text(json.dumps({"devices": [{"uuid": "GPU-fake-0", **device}]}))
    monkeypatch.setenv("COLLOBENCH_FAKE_NVML", str(script))


@pytest.mark.spawns
@pytest.mark.slow
def test_fake_gpu_is_sampled_once_per_device_with_its_energy_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu(tmp_path, monkeypatch, power_w=100, processes=[{"pid": 999999, "used_memory_mib": 64}])
    doc = spec_doc({"type": "noop"})
    doc["telemetry"]["gpu"] = {"period_ms": 20}
    result = run(doc, tmp_path)
    assert result.status == "ok"
    gpu = read_table(result.run_dir, "gpu_samples").to_pandas()
    assert set(gpu.gpu) == {0}
    # Counter rows carry energy only where the counter moved; the rest have it NULL.
    assert set(gpu.energy_source.dropna()) == {"nvml_counter"}
    assert gpu.ts_ns.is_monotonic_increasing  # one sampler for the device, not one per pipeline
    energy = gpu.energy_j.max()
    window_s = (gpu.ts_ns.max() - gpu.ts_ns.min()) / 1e9
    assert energy == pytest.approx(100 * window_s, rel=0.2, abs=15)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["energy"]["gpu_source"] == "nvml_counter"
    assert any("foreign compute process" in w and "999999" in w for w in manifest["warnings"])


def test_launch_error_for_impossible_pinning(tmp_path: Path) -> None:
    doc = spec_doc({"type": "noop"})
    doc["collocation"]["mode"] = "cpu_pinned"
    doc["pipelines"][0]["placement"] = {"cpus": [0]}
    doc["pipelines"][1]["placement"] = {"cpus": [0]}
    with pytest.raises(LaunchError, match="cpu 0 is given to both 'victim' and 'survivor'"):
        run(doc, tmp_path)


@pytest.mark.spawns
@pytest.mark.slow
def test_lost_gpu_and_counter_reset_reach_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reset and the loss count from a trigger file the test creates once the victim has
    # had 1 s of load: inside the window however slowly the sampler started (no wall clock).
    trigger = tmp_path / "gpu-events-start"
    fake_gpu(
        tmp_path,
        monkeypatch,
        power_w=120,
        energy_resets_at_s=[0.0],
        lost_at_s=0.3,
        events_after_file=str(trigger),
    )
    doc = spec_doc({"type": "noop"}, duration_s=3)
    doc["pipelines"][1]["loadgen"]["duration_s"] = 3
    doc["telemetry"]["gpu"] = {"period_ms": 20}

    def start_events(event: ProgressEvent) -> None:
        first_ns = event.data.get("first_issue_ns")
        if first_ns is not None and time.monotonic_ns() - first_ns > 1e9:
            trigger.touch(exist_ok=True)

    result = run(doc, tmp_path, progress=start_events)
    assert trigger.exists()
    assert result.status == "ok"  # losing telemetry does not fail the pipelines
    gpu = read_table(result.run_dir, "gpu_samples").to_pandas()
    assert len(gpu) > 10  # rows before the loss are kept
    assert gpu.energy_j.dropna().is_monotonic_increasing  # the reset was repaired
    warnings = " | ".join(result.warnings)
    assert "gpu0-sampler" in warnings and "reset 1 time(s)" in warnings
    assert "samples taken before it are kept" in warnings


@pytest.mark.spawns
@pytest.mark.slow
def test_a_worker_failing_in_prepare_is_reported_with_its_traceback(tmp_path: Path) -> None:
    doc = spec_doc({"type": "copy", "config": {"bytes": 10**15}})  # no machine has 1 PB free
    result = run(doc, tmp_path)
    victim = outcome(result, "victim")
    assert victim.status == "failed"
    assert victim.error is not None and victim.error.startswith("MemoryError")
    assert victim.traceback is not None and "prepare" in victim.traceback
    assert_survivor_kept(result)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["seeds"]["victim"]["arrivals_by_trial"][0] > 0


@pytest.mark.spawns
@pytest.mark.slow
def test_a_phase_whose_every_worker_fails_in_prepare_is_reported(tmp_path: Path) -> None:
    """No worker reaches the barrier: the phase's load window is empty (start = end), the
    manifest stays valid, and the failure is the outcome's error, not a manifest problem."""
    doc = spec_doc({"type": "copy", "config": {"bytes": 10**15}})
    doc["pipelines"] = doc["pipelines"][:1]
    result = run(doc, tmp_path)
    victim = outcome(result, "victim")
    assert victim.status == "failed" and victim.error.startswith("MemoryError")
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    (phase,) = [entry for entry in manifest["timeline"] if entry["what"] == "phase"]
    assert phase["start_ns"] == phase["end_ns"]
    assert manifest["status"] == "failed"


@pytest.mark.spawns
@pytest.mark.slow
def test_trace_paths_are_relative_to_the_spec_file(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "arrivals.csv").write_text("offset_ms\n0\n10\n20\n30\n")
    doc = {
        "name": "traced",
        "pipelines": [
            {
                "name": "replay",
                "loadgen": {"type": "trace", "trace": "arrivals.csv"},
                "stages": [{"id": "s", "type": "noop"}],
            }
        ],
    }
    (folder / "spec.yaml").write_text(yaml.safe_dump(doc))
    completed = collobench(
        "run", str(folder / "spec.yaml"), "--out", str(tmp_path / "out"), "--no-mlflow"
    )
    assert completed.returncode == 0, completed.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    queries = read_table(run_dir, "queries").to_pandas().sort_values("query_id")
    offsets = (queries.scheduled_ns - queries.scheduled_ns.min()).tolist()
    assert offsets == [0, 10_000_000, 20_000_000, 30_000_000]

    (folder / "arrivals.csv").write_text("offset_ms\n5\n1\n")
    completed = collobench("run", str(folder / "spec.yaml"), "--out", str(tmp_path / "out2"))
    assert completed.returncode == 2
    assert "pipelines[0].loadgen.trace:" in completed.stderr
    assert "offsets must be >= 0 and non-decreasing" in completed.stderr


@pytest.mark.spawns
@pytest.mark.slow
def test_a_killed_launcher_takes_its_children_with_it(tmp_path: Path) -> None:
    process, out, children = start_long_run(tmp_path)
    try:
        process.kill()  # SIGKILL: no handler runs in the launcher
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    _gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
    (run_dir,) = out.iterdir()
    queries = read_table(run_dir, "queries").to_pandas()  # from the chunk files
    assert set(queries.pipeline) == {"victim", "survivor"}
    assert (queries.status == "ok").sum() > 100


def test_phase_order_alternates_between_trials() -> None:
    from stages.collocation.launcher import phases_of

    doc = {
        "name": "abba",
        "repeats": 3,
        "pipelines": [
            {"name": name, "stages": [{"id": "s", "type": "noop"}]} for name in ("a", "b")
        ],
    }
    plan = [
        (trial, phase, [p.name for p in pipelines])
        for trial, phase, pipelines in phases_of(validate_document(doc, "test").spec)
    ]
    assert plan == [
        (0, "solo", ["a"]),
        (0, "solo", ["b"]),
        (0, "collocated", ["a", "b"]),
        (1, "collocated", ["a", "b"]),
        (1, "solo", ["b"]),
        (1, "solo", ["a"]),
        (2, "solo", ["a"]),
        (2, "solo", ["b"]),
        (2, "collocated", ["a", "b"]),
    ]


@pytest.mark.spawns
@pytest.mark.slow
def test_the_harness_stays_out_of_every_load_window(tmp_path: Path) -> None:
    """Finding 7: the environment probe ran during the first solo baseline and samplers were not
    awaited. Now the probe ends, the idle baseline is sampled and every sampler has its first
    sample before any load window opens; the manifest records the order and the timeline."""
    loadgen = {"type": "server", "rate": 200, "duration_s": 0.4, "timeout_s": 20}
    doc = {
        "name": "harness-out",
        "repeats": 2,
        "telemetry": {"host": {"period_ms": 50}, "idle_baseline_s": 0.3},
        "pipelines": [
            {"name": name, "loadgen": loadgen, "stages": [{"id": "s", "type": "noop"}]}
            for name in ("a", "b")
        ],
    }
    result = run(doc, tmp_path)
    assert result.status == "ok", [o.error for o in result.results]
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [tuple(step[:2]) for step in manifest["phase_order"]] == [
        (0, "solo"),
        (0, "solo"),
        (0, "collocated"),
        (1, "collocated"),
        (1, "solo"),
        (1, "solo"),
    ]
    timeline = manifest["timeline"]
    (probe,) = [step for step in timeline if step["what"] == "environment_probe"]
    (idle,) = [step for step in timeline if step["what"] == "idle"]
    phases = [step for step in timeline if step["what"] == "phase"]
    assert [(p["trial"], p["phase"]) for p in phases] == [
        tuple(step[:2]) for step in manifest["phase_order"]
    ]
    assert probe["end_ns"] <= idle["start_ns"] < idle["end_ns"] <= phases[0]["start_ns"]
    queries = read_table(result.run_dir, "queries").to_pandas()
    host = read_table(result.run_dir, "host_samples").to_pandas()
    assert (host[host.phase == "idle"].scope == "host").any()
    assert (host.scope == "harness").any()
    previous_end_ns = idle["end_ns"]
    for step in phases:
        mine = queries[(queries.trial == step["trial"]) & (queries.phase == step["phase"])]
        mine = mine[mine.pipeline.isin(step["pipelines"])]
        # every load window opens after the probe, with this phase's sampler already sampling
        assert int(mine.scheduled_ns.min()) >= step["start_ns"] > probe["end_ns"]
        samples = host[
            (host.trial == step["trial"]) & (host.phase == step["phase"]) & (host.scope == "host")
        ]
        before_start = samples.ts_ns.between(previous_end_ns, step["start_ns"])
        assert before_start.any(), step
        previous_end_ns = step["end_ns"]


@pytest.mark.spawns
@pytest.mark.slow
def test_foreign_cpu_load_in_a_window_is_a_manifest_warning(tmp_path: Path) -> None:
    """Finding 8: a process outside the benchmark burning a core during the load windows shows
    as foreign CPU (host - workers - harness) and reaches the manifest as a warning."""
    from stages.cli.wiring import summarize_phase

    loadgen = {"type": "server", "rate": 100, "duration_s": 1.0, "timeout_s": 20}
    doc = {
        "name": "neighbour",
        "telemetry": {"host": {"period_ms": 50}},
        "pipelines": [{"name": "a", "loadgen": loadgen, "stages": [{"id": "s", "type": "noop"}]}],
    }
    # Started through a parent that exits at once, so the burner is not a descendant of this
    # process (which is the launcher here, and whose descendants count as the harness).
    spawner = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "burner = subprocess.Popen([sys.executable, '-c', 'while True: pass'],"
            " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
            " start_new_session=True)\n"
            "print(burner.pid)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    burner = psutil.Process(int(spawner.stdout))
    try:
        result = run(doc, tmp_path, summarize_phase=summarize_phase)
    finally:
        burner.kill()
        with contextlib.suppress(psutil.Error):
            burner.wait(timeout=10)
    assert result.status == "ok"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    (warning,) = [w for w in manifest["warnings"] if "foreign CPU load" in w]
    assert warning.startswith("trial 0 solo (a): ")
    assert manifest["results"][0]["summary"]["queries_ok"] > 90

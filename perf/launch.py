"""Cost and isolation of collocation: how long `collobench run` takes to get load flowing, how
well the start barrier lines the pipelines up, and whether CPU pinning isolates them.

Prints ONE JSON line on stdout (progress on stderr). Every run is the real console script
(`.venv/bin/collobench run SPEC --no-mlflow --out TMP`) in a subprocess, with `COLLOBENCH_HOME`
in a temporary folder; results are read back from the run directory with
`stages.rundir.read_table`. Times compare this process's `time.monotonic_ns()` with the
recorded nanoseconds: one monotonic clock shared by every process of a Linux host.

(a) Start-up and barrier. A spec with two one-stage `noop` pipelines under Poisson load (server,
    1,000 queries/s each, 2 s, no solo baselines). Time to first issued query = min
    `issued_ns` of the collocated phase - the clock read just before starting the subprocess,
    split into CLI start-up (until the launcher's clock reading in `manifest.json`), launcher
    to the common start instant (environment capture, spawning and preparing the workers,
    barrier), and start to first issue. Each pipeline's start instant is recovered exactly from
    its first `scheduled_ns` minus the first offset of its arrival schedule (recomputed from the
    seed, as the worker draws it). Barrier skew = difference between the two pipelines' realised
    starts (first `issued_ns` minus that first offset); target < 5 ms. The raw differences of
    the first scheduled and first issued times (which include the two Poisson draws) are
    reported beside it.
(b) Isolation on CPU. Two `busy` (ms 2, release_gil false) closed-loop pipelines (concurrency 2)
    with solo baselines, pinned to separate cores (`cpu_pinned`, cpus [0] and [1]) and then
    time-sliced on one core (`time_slice`, both cpus [0]). Per pipeline: throughput (ok,
    non-warm-up queries / their window) collocated / solo, and the CPU share its process got
    (mean `cpu_util` of its `host_samples` rows). Pinned on separate cores should stay ~1.0; two
    CPU-bound pipelines sharing one core should each drop to ~0.5: `busy` performs a fixed,
    calibrated amount of work per query, so a query that is time-sliced takes longer (a
    wall-clock busy-wait would "complete" while preempted and hide the contention).

(c) Time to the first measured query of a model-less CPU spec (the shipped kind: two `busy`
    closed-loop pipelines, ms 2, concurrency 2, solo baselines; 1 s windows, since only the
    first phase's start counts): from the clock read just before starting `collobench run` to
    the first solo phase's earliest measured `scheduled_ns`, with the manifest's `startup`
    breakdown (seconds from the process's exec) beside it, as medians over the repeats. One
    run first, not counted, fills the home's cache (torch's build details,
    stages.collocation.torch_probe; the busy calibration) as any earlier run on a machine has;
    its figure is reported as `first_run_s`. Target: at most TARGET_FIRST_QUERY_S on an
    unloaded machine (`background_cpu_pct.first_query` says how loaded it was).

Why: collocation results are only worth something if the load windows really overlap and if a
placement that promises isolation delivers it (and one that does not, shows contention).
Users run many short runs, and paired A/B runs multiply every second of start-up.
`--quick` runs one start-up repeat and shorter isolation windows (~40-60 s in all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from perf import common
from perf.common import REPO_ROOT, BackgroundLoad, report_header, wait_for_quiet
from stages.rundir.tables import read_table
from stages.runtime.driver import arrival_seed
from stages.runtime.loadgen.kinds import arrival_process
from stages.spec.loadgen import loadgen_spec

TARGET_SKEW_MS = 5.0
TARGET_FIRST_QUERY_S = 2.5
STARTUP_STEPS = ("cli_ready_s", "spec_loaded_s", "launcher_s", "environment_probed_s")
PHASE_STEPS = ("spawned_s", "ready_s", "calibrated_s", "started_s")
SERVER_RATE_QPS = 1000
SERVER_DURATION_S = 2.0
BUSY_MS = 2.0
COLLOBENCH = Path(sys.executable).with_name("collobench")
SCRIPT = "launch"


def log(message: str) -> None:
    common.log(SCRIPT, message)


def run_cli(spec: dict[str, Any], work: Path) -> tuple[Path, int, int, int]:
    """Write `spec`, run `collobench run` on it; (run dir, t0 before start, t at exit, rc)."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / f"{spec['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = work / "runs"
    home = work.parent / "home"  # shared by the runs of one measurement (its cache warm)
    environment = {**os.environ, "COLLOBENCH_HOME": str(home), "COLLOBENCH_MLFLOW": "0"}
    command = [str(COLLOBENCH), "run", str(spec_path), "--no-mlflow", "--out", str(out)]
    t0_ns = time.monotonic_ns()
    completed = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=600
    )
    t_exit_ns = time.monotonic_ns()
    if completed.returncode != 0:
        log(f"collobench run exited {completed.returncode}: {completed.stderr.strip()[-2000:]}")
    run_dirs = sorted(path for path in out.iterdir() if path.is_dir())
    return run_dirs[-1], t0_ns, t_exit_ns, completed.returncode


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


# --------------------------------------------------------------------------- (a) start-up


def server_pipeline(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "loadgen": {"type": "server", "rate": SERVER_RATE_QPS, "duration_s": SERVER_DURATION_S},
        "stages": [{"id": "nothing", "type": "noop"}],
    }


def first_offset_ns(loadgen: dict[str, Any], seed: int, pipeline: str) -> int:
    """The first arrival offset the worker draws for `pipeline` (trial 0)."""
    schedule = arrival_process(loadgen_spec(**loadgen)).schedule(
        random.Random(arrival_seed(seed, pipeline, 0))
    )
    return next(iter(schedule))[0]


def startup_once(index: int, work: Path) -> dict[str, Any]:
    seed = index
    pipelines = [server_pipeline("left"), server_pipeline("right")]
    spec = {
        "name": "launch-startup",
        "seed": seed,
        "collocation": {"mode": "time_slice", "solo_baselines": False},
        "pipelines": pipelines,
    }
    run_dir, t0_ns, t_exit_ns, code = run_cli(spec, work / f"startup{index}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    launcher_ns = int(manifest["clock"]["monotonic_ns"])
    rows = [row for row in rows_of(read_table(run_dir, "queries")) if row["phase"] == "collocated"]
    per: dict[str, dict[str, int]] = {}
    for pipeline in pipelines:
        name = pipeline["name"]
        mine = [row for row in rows if row["pipeline"] == name]
        first_scheduled = min(row["scheduled_ns"] for row in mine)
        first_issued = min(row["issued_ns"] for row in mine if row["issued_ns"] is not None)
        offset = first_offset_ns(pipeline["loadgen"], seed, name)
        per[name] = {
            "start_ns": first_scheduled - offset,
            "first_scheduled_ns": first_scheduled,
            "first_issued_ns": first_issued,
            "realised_start_ns": first_issued - offset,
            "last_completed_ns": max(row["completed_ns"] or 0 for row in mine),
        }
    left, right = per["left"], per["right"]
    start_ns = min(left["start_ns"], right["start_ns"])
    first_issue_ns = min(left["first_issued_ns"], right["first_issued_ns"])
    last_completed_ns = max(left["last_completed_ns"], right["last_completed_ns"])
    figures = {
        "exit_code": code,
        "time_to_first_issue_ms": round((first_issue_ns - t0_ns) / 1e6, 1),
        "cli_startup_ms": round((launcher_ns - t0_ns) / 1e6, 1),
        "launcher_to_common_start_ms": round((start_ns - launcher_ns) / 1e6, 1),
        "common_start_to_first_issue_ms": round((first_issue_ns - start_ns) / 1e6, 3),
        "start_instant_diff_us": round(abs(left["start_ns"] - right["start_ns"]) / 1e3, 1),
        "barrier_skew_us": round(
            abs(left["realised_start_ns"] - right["realised_start_ns"]) / 1e3, 1
        ),
        "first_scheduled_diff_us": round(
            abs(left["first_scheduled_ns"] - right["first_scheduled_ns"]) / 1e3, 1
        ),
        "first_issued_diff_us": round(
            abs(left["first_issued_ns"] - right["first_issued_ns"]) / 1e3, 1
        ),
        "last_completion_to_exit_ms": round((t_exit_ns - last_completed_ns) / 1e6, 1),
        "total_wall_s": round((t_exit_ns - t0_ns) / 1e9, 2),
    }
    log(f"startup #{index}: {figures}")
    return figures


def environment_capture_ms() -> float:
    """What the launcher's manifest probe (versions, git, CPU, torch in a subprocess) costs:
    part of `launcher_to_common_start_ms`, measured here once in this process."""
    from stages.collocation.environment import capture_environment

    started = time.monotonic()
    capture_environment(REPO_ROOT)
    return round((time.monotonic() - started) * 1e3, 1)


def measure_startup(repeats: int, work: Path) -> dict[str, Any]:
    runs = [startup_once(index, work) for index in range(repeats)]
    environment_ms = environment_capture_ms()
    median = {
        key: round(float(np.median([run[key] for run in runs])), 3)
        for key in runs[0]
        if key != "exit_code"
    }
    return {
        "repeats": repeats,
        "pipelines": 2,
        "rate_qps_each": SERVER_RATE_QPS,
        "duration_s": SERVER_DURATION_S,
        "median": median,
        "environment_capture_ms": environment_ms,
        "barrier_skew_us_max": max(run["barrier_skew_us"] for run in runs),
        "exit_codes": [run["exit_code"] for run in runs],
    }


# --------------------------------------------------------------------------- (b) isolation


def busy_pipeline(name: str, cpus: list[int], duration_s: float) -> dict[str, Any]:
    return {
        "name": name,
        "placement": {"cpus": cpus},
        "loadgen": {
            "type": "closed_loop",
            "concurrency": 2,
            "duration_s": duration_s,
            "warmup_s": 0.3,
        },
        "stages": [{"id": "crunch", "type": "busy", "config": {"ms": BUSY_MS}}],
    }


def isolation_mode(
    mode: str, cpus: tuple[list[int], list[int]], duration_s: float, work: Path
) -> dict[str, Any]:
    spec = {
        "name": f"isolation-{mode.replace('_', '-')}",
        "seed": 0,
        "collocation": {"mode": mode, "solo_baselines": True},
        "pipelines": [
            busy_pipeline("left", cpus[0], duration_s),
            busy_pipeline("right", cpus[1], duration_s),
        ],
    }
    run_dir, _t0, _t1, code = run_cli(spec, work / mode)
    queries = rows_of(read_table(run_dir, "queries"))
    samples = rows_of(read_table(run_dir, "host_samples"))
    figures: dict[str, Any] = {"exit_code": code, "cpus": {"left": cpus[0], "right": cpus[1]}}
    for name in ("left", "right"):
        per_phase: dict[str, dict[str, float | None]] = {}
        for phase in ("solo", "collocated"):
            mine = [
                row
                for row in queries
                if row["pipeline"] == name
                and row["phase"] == phase
                and row["status"] == "ok"
                and not row["warmup"]
            ]
            window_s = (
                max(row["completed_ns"] for row in mine) - min(row["scheduled_ns"] for row in mine)
            ) / 1e9
            cpu = [
                row["cpu_util"]
                for row in samples
                if row["pipeline"] == name
                and row["phase"] == phase
                and row["scope"] == "process"
                and row["cpu_util"] is not None
            ]
            per_phase[phase] = {
                "qps": round(len(mine) / window_s, 1),
                "cpu_pct_of_core": round(float(np.median(cpu)), 1) if cpu else None,
            }
        figures[name] = {
            "solo_qps": per_phase["solo"]["qps"],
            "collocated_qps": per_phase["collocated"]["qps"],
            "throughput_ratio": round(
                float(per_phase["collocated"]["qps"] or 0) / float(per_phase["solo"]["qps"] or 1), 3
            ),
            "solo_cpu_pct_of_core": per_phase["solo"]["cpu_pct_of_core"],
            "collocated_cpu_pct_of_core": per_phase["collocated"]["cpu_pct_of_core"],
        }
    log(f"isolation {mode}: {figures}")
    return figures


# --------------------------------------------------------------------------- (c) first query


def first_query_once(work: Path) -> dict[str, Any]:
    """One run of the two-busy-pipeline spec: seconds to its first measured query, measured
    here and as the manifest's `startup` has it, and that breakdown."""
    pipelines = [busy_pipeline("left", [0], 1.0), busy_pipeline("right", [0], 1.0)]
    for pipeline in pipelines:
        pipeline["loadgen"].pop("warmup_s")  # as shipped: specs/cpu_contention.yaml
    spec = {
        "name": "launch-first-query",
        "seed": 0,
        "collocation": {"mode": "time_slice", "solo_baselines": True},
        "pipelines": pipelines,
    }
    run_dir, t0_ns, _t1, code = run_cli(spec, work)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    startup = manifest["startup"]
    first_ns = min(
        row["scheduled_ns"]
        for row in rows_of(read_table(run_dir, "queries"))
        if row["phase"] == "solo" and row["pipeline"] == "left" and not row["warmup"]
    )
    first = startup["phases"][0]
    figures = {
        "exit_code": code,
        "first_query_s": round((first_ns - t0_ns) / 1e9, 3),
        "manifest_first_query_s": startup["first_measured_query_s"],
        **{step: startup[step] for step in STARTUP_STEPS},
        **{f"first_phase_{step}": first[step] for step in PHASE_STEPS},
    }
    log(f"first query: {figures}")
    return figures


def measure_first_query(repeats: int, work: Path) -> dict[str, Any]:
    first_run = first_query_once(work / "first")
    runs = [first_query_once(work / f"run{index}") for index in range(repeats)]
    keys = [key for key in runs[0] if key != "exit_code"]
    return {
        "repeats": repeats,
        "method": "median over the repeats, after one uncounted run that fills the cache",
        "first_run_s": first_run["first_query_s"],
        "median": {key: round(float(np.median([run[key] for run in runs])), 3) for key in keys},
        "max_first_query_s": max(run["first_query_s"] for run in runs),
        "exit_codes": [first_run["exit_code"]] + [run["exit_code"] for run in runs],
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one start-up run, short windows")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    busy_s = 1.5 if args.quick else 4.0
    waited_s = wait_for_quiet(SCRIPT, 5.0 if args.quick else 30.0)
    background: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="collobench-launch-") as directory:
        work = Path(directory)
        with BackgroundLoad() as load:
            startup = measure_startup(repeats, work)
        background["startup"] = load.pct
        with BackgroundLoad() as load:
            first_query = measure_first_query(repeats + 2, work / "first_query")
        background["first_query"] = load.pct
        isolation: dict[str, Any] = {"busy_ms": BUSY_MS, "window_s": busy_s}
        with BackgroundLoad() as load:
            isolation["cpu_pinned"] = isolation_mode("cpu_pinned", ([0], [1]), busy_s, work)
        background["cpu_pinned"] = load.pct
        with BackgroundLoad() as load:
            isolation["time_slice"] = isolation_mode("time_slice", ([0], [0]), busy_s, work)
        background["time_slice"] = load.pct
    report = {
        **report_header(SCRIPT, "quick" if args.quick else "full", waited_s, background),
        "startup": startup,
        "first_query": first_query,
        "isolation": isolation,
        "targets": {
            "barrier_skew_ms_max": TARGET_SKEW_MS,
            "first_query_s_max": TARGET_FIRST_QUERY_S,
        },
        "met": {
            "barrier_skew": startup["barrier_skew_us_max"] / 1e3 < TARGET_SKEW_MS,
            "first_query": first_query["median"]["first_query_s"] <= TARGET_FIRST_QUERY_S,
        },
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

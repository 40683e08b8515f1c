"""What routing a benchmark through Celery costs: time from submitting a run to its first
measured query, through dagster-celery's run launcher against Dagster's DefaultRunLauncher, on
one instance that differs only in the launcher.

Prints ONE JSON line on stdout (progress on stderr). Set-up: a temporary COLLOBENCH_HOME with a
tiny spec (one `sleep` stage, 1 ms, 100 q/s for 1 s, no warm-up, no solo baselines);
`python -m bench_defs.cluster up --workers 1 --launcher celery` (Postgres on a unix socket,
Redis, code server, webserver, daemon, one Celery worker for the pool `host-a`), then the same
with `--launcher default` (no worker: each run a subprocess of the code server), the cluster
brought down between the two and at the end (also on an error) by process group.

Per launcher, one warm-up run (not counted), then N runs (`--runs`, default 5) of
`benchmark_job` with only its `benchmark_run` step (the warehouse and report steps, the same
under both launchers, would double the time) submitted one after another through GraphQL
(`dagster_graphql`, the pool's tags), each awaited before the next. Per run, on
the wall clock of this host (the run directory's `issued_ns` is `time.monotonic_ns`, mapped to
wall time by the manifest's `clock`):
- submission -> first measured query: the clock read just before the GraphQL call to the
  earliest `issued_ns` of a non-warm-up query in the run's `queries` table;
- submission -> success: to the run record's `end_time` (the benchmark step done);
- the parts: queued (submission -> the daemon's RUN_STARTING event, which waits for the run
  queue's 5 s dequeue interval), launch (-> RUN_START: the Celery task picked up, or the code
  server's subprocess started), in the run (-> the first query: step, Pipes child,
  `collobench run`'s start-up), to success (-> end).

Per launcher: the median and a 95% percentile-bootstrap interval of each figure; then
`celery_extra_s`: median(celery) - median(default) with a 95% bootstrap interval (each launcher's
runs resampled on their own, 10,000 times, seed 0); with 5 runs an interval is about the range.
Failed runs are counted and left out (exit 1 if a launcher had none). About 4 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import yaml

from perf import common
from perf.common import REPO_ROOT, BackgroundLoad, report_header, wait_for_quiet
from stages.rundir.tables import read_table

SCRIPT = "cluster_launch"
LAUNCHERS = ("celery", "default")
PARTITION = "perf-tiny"
RUNS = 5
WARMUP_RUNS = 1
RESAMPLES = 10_000
UP_TIMEOUT_S = 420.0
RUN_TIMEOUT_S = 300.0
FIGURES = ("submit_to_first_query_s", "submit_to_success_s")
PARTS = ("queued_s", "launch_s", "in_run_to_first_query_s", "first_query_to_success_s")


def log(message: str) -> None:
    common.log(SCRIPT, message)


# --------------------------------------------------------------------------- statistics


def median_interval(
    values: Sequence[float], seed: int = 0, resamples: int = RESAMPLES
) -> dict[str, Any]:
    """The median of `values` and a 95% percentile-bootstrap interval (seconds, 3 decimals)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return {"median": None, "ci95": None, "n": 0}
    rng = np.random.default_rng(seed)
    draws = np.median(rng.choice(data, size=(resamples, data.size)), axis=1)
    low, high = np.percentile(draws, [2.5, 97.5])
    return {
        "median": round(float(np.median(data)), 3),
        "ci95": [round(float(low), 3), round(float(high), 3)],
        "n": int(data.size),
    }


def difference_interval(
    first: Sequence[float], second: Sequence[float], seed: int = 0, resamples: int = RESAMPLES
) -> dict[str, Any]:
    """median(first) - median(second) and a 95% bootstrap interval, each sample resampled on
    its own."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.size == 0 or b.size == 0:
        return {"median_difference": None, "ci95": None}
    rng = np.random.default_rng(seed)
    draws_a = np.median(rng.choice(a, size=(resamples, a.size)), axis=1)
    draws_b = np.median(rng.choice(b, size=(resamples, b.size)), axis=1)
    low, high = np.percentile(draws_a - draws_b, [2.5, 97.5])
    return {
        "median_difference": round(float(np.median(a) - np.median(b)), 3),
        "ci95": [round(float(low), 3), round(float(high), 3)],
    }


# --------------------------------------------------------------------------- the cluster


def tiny_spec() -> dict[str, Any]:
    return {
        "name": PARTITION,
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": [
            {
                "name": "p",
                "loadgen": {
                    "type": "server",
                    "rate": 100,
                    "duration_s": 1,
                    "warmup_queries": 0,
                    "timeout_s": 30,
                },
                "stages": [{"id": "s", "type": "sleep", "config": {"ms": 1}}],
            }
        ],
    }


@dataclass
class Cluster:
    """The temporary folder the cluster lives in and the environment its CLI runs with."""

    base: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def root(self) -> Path:
        return self.home / "cluster"

    def cli(self, *args: str, timeout_s: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench_defs.cluster", *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )

    def url(self) -> str:
        from bench_defs.cluster.procs import load_state

        url = load_state(self.root / "state.json").webserver_url
        assert url is not None
        return url

    def running(self) -> bool:
        from bench_defs.cluster.procs import alive, load_state

        return any(alive(record) for record in load_state(self.root / "state.json").processes)


def new_cluster() -> Cluster:
    """A folder Postgres (its own account when this runs as root) can enter, the spec in it."""
    base = Path(tempfile.mkdtemp(prefix="collobench-cluster-launch-"))
    base.chmod(base.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    specs = base / "specs"
    specs.mkdir()
    (specs / f"{PARTITION}.yaml").write_text(yaml.safe_dump(tiny_spec(), sort_keys=False))
    drop = ("DAGSTER_HOME", "COLLOBENCH_POOLS_FILE", "COLLOBENCH_RESULTS_DIR")
    env = {key: value for key, value in os.environ.items() if key not in drop}
    path = env.get("PYTHONPATH")
    env |= {
        "COLLOBENCH_HOME": str(base / "home"),
        "COLLOBENCH_SPECS_DIR": str(specs),
        "COLLOBENCH_MLFLOW": "0",
        "PYTHONPATH": f"{REPO_ROOT}:{path}" if path else str(REPO_ROOT),
    }
    return Cluster(base, env)


def bring_up(cluster: Cluster, launcher: str) -> float:
    """`up --workers 1 --launcher L`; seconds `up` took."""
    started = time.monotonic()
    done = cluster.cli("up", "--workers", "1", "--launcher", launcher)
    if done.returncode != 0:
        raise RuntimeError(f"cluster up ({launcher}) failed: {(done.stdout + done.stderr)[-2000:]}")
    return round(time.monotonic() - started, 1)


def bring_down(cluster: Cluster) -> None:
    """`down` by the CLI; if anything recorded still runs, `down` in this process too."""
    from bench_defs.cluster.control import down
    from bench_defs.cluster.layout import Layout

    with contextlib.suppress(subprocess.SubprocessError, OSError):
        done = cluster.cli("down", timeout_s=120)
        log(done.stdout.strip() or done.stderr.strip()[-500:])
    if cluster.running():
        log("processes left after `down`: stopping them from here")
        down(Layout(cluster.root))


def missing_tools() -> str | None:
    """Why the cluster cannot start here (no redis-server or PostgreSQL), or None."""
    from bench_defs.cluster.layout import pg_bin

    if shutil.which("redis-server") is None:
        return "redis-server not found (apt-get install redis-server)"
    if not Path(pg_bin("initdb")).is_file():
        return f"PostgreSQL not found ({pg_bin('initdb')})"
    return None


# --------------------------------------------------------------------------- one run


def run_dir_of(cluster: Cluster, run_id: str) -> Path:
    """The run's directory: under the worker host's home (Celery), the cluster's home
    (default launcher) or a shared results folder."""
    roots = [cluster.home / "runs", *cluster.root.glob("hosts/*/runs")]
    roots += [cluster.root / "results" / "runs"]
    found = [path for root in roots for path in root.glob(f"*-{run_id[:8]}")]
    if len(found) != 1:
        raise RuntimeError(f"run {run_id}: {len(found)} run directories: {found}")
    return found[0]


def first_query_wall_ns(run_dir: Path) -> int:
    """The earliest issue of a measured (non-warm-up) query, in wall-clock ns (`issued_ns` is
    monotonic; the manifest's `clock` maps it)."""
    clock = json.loads((run_dir / "manifest.json").read_text())["clock"]
    table = read_table(run_dir, "queries")
    measured = table.filter(
        pc.and_(pc.invert(table["warmup"]), pc.not_equal(table["status"], "not_issued"))
    )
    first = pc.min(measured["issued_ns"]).as_py()
    if first is None:
        raise RuntimeError(f"{run_dir}: no measured query issued")
    return int(clock["wall_time_ns"]) + int(first) - int(clock["monotonic_ns"])


def one_run(cluster: Cluster, client: Any, tags: dict[str, str]) -> dict[str, float]:
    """Submit one `benchmark_job` run and await it; its figures in seconds (RuntimeError if it
    did not succeed)."""
    times = client.run("benchmark_job", tags, RUN_TIMEOUT_S, assets=["benchmark_run"])
    starting, started, ended = times.starting_s, times.started_s, times.ended_s
    if times.status != "SUCCESS" or starting is None or started is None or ended is None:
        raise RuntimeError(f"run {times.run_id[:8]} {times.status}: {times.failure}")
    first = first_query_wall_ns(run_dir_of(cluster, times.run_id)) / 1e9
    submitted = times.submitted_s
    return {
        "submit_to_first_query_s": first - submitted,
        "submit_to_success_s": ended - submitted,
        "queued_s": starting - submitted,
        "launch_s": started - starting,
        "in_run_to_first_query_s": first - started,
        "first_query_to_success_s": ended - first,
    }


# --------------------------------------------------------------------------- per launcher


def measure_launcher(cluster: Cluster, launcher: str, runs: int, warmup: int) -> dict[str, Any]:
    """Bring the cluster up with `launcher`, run warm-up + `runs` runs, bring it down."""
    from bench_defs.cluster.run_timing import ClusterClient
    from bench_defs.core.pools import load_pools, pool_tags

    samples: list[dict[str, float]] = []
    errors: list[str] = []
    log(f"{launcher}: up")
    up_s = bring_up(cluster, launcher)
    try:
        log(f"{launcher}: up in {up_s} s; {warmup} warm-up and {runs} runs")
        pool = load_pools(cluster.root / "pools.yaml")[0]
        tags = {"dagster/partition": PARTITION, **pool_tags(pool)}
        with ClusterClient(cluster.root / "dagster_home", cluster.url()) as client:
            client.add_spec_partition(PARTITION)
            for index in range(warmup + runs):
                try:
                    result = one_run(cluster, client, tags)
                except (RuntimeError, TimeoutError) as error:
                    log(f"{launcher} #{index}: {error}")
                    errors.append(str(error)[:300])
                    continue
                shown = {key: round(value, 2) for key, value in result.items()}
                log(f"{launcher} #{index}{' (warm-up)' if index < warmup else ''}: {shown}")
                if index >= warmup:
                    samples.append(result)
    finally:
        bring_down(cluster)
    return {"up_s": up_s, "samples": samples, "errors": errors}


def summarise(measured: dict[str, Any]) -> dict[str, Any]:
    samples = measured["samples"]
    summary: dict[str, Any] = {"up_s": measured["up_s"], "runs_ok": len(samples)}
    summary["failed"] = len(measured["errors"])
    for figure in FIGURES:
        summary[figure] = median_interval([sample[figure] for sample in samples])
    summary["parts_median_s"] = {
        part: round(float(np.median([sample[part] for sample in samples])), 3) if samples else None
        for part in PARTS
    }
    summary["samples_s"] = {
        figure: [round(sample[figure], 3) for sample in samples] for figure in (*FIGURES, *PARTS)
    }
    if measured["errors"]:
        summary["errors"] = measured["errors"][:3]
    return summary


def celery_extra(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """median(celery) - median(default) per figure, and for the launch part alone."""
    extra = {}
    for figure in (*FIGURES, "launch_s"):
        celery = [sample[figure] for sample in results["celery"]["samples"]]
        default = [sample[figure] for sample in results["default"]["samples"]]
        extra[figure.removesuffix("_s")] = difference_interval(celery, default)
    return extra


# --------------------------------------------------------------------------- main


def quiet_pct() -> float:
    """Other processes' CPU over one second (nothing of the cluster runs then)."""
    with BackgroundLoad() as load:
        time.sleep(1.0)
    return load.pct


def measure(runs: int, warmup: int) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Both launchers on one cluster folder; the cluster down (and its folder gone) after."""
    cluster = new_cluster()
    results: dict[str, dict[str, Any]] = {}
    background: dict[str, float] = {}
    try:
        for launcher in LAUNCHERS:
            background[f"before_{launcher}"] = quiet_pct()
            results[launcher] = measure_launcher(cluster, launcher, runs, warmup)
    finally:
        bring_down(cluster)
        if not cluster.running():
            shutil.rmtree(cluster.base, ignore_errors=True)
    return results, background


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs per launcher ({RUNS})")
    parser.add_argument("--warmup", type=int, default=WARMUP_RUNS, help="uncounted runs first")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `finally` brings the cluster down
    mode = "full" if args.runs >= RUNS else "quick"
    missing = missing_tools()
    if missing is not None:
        header = report_header(SCRIPT, mode, 0.0, {})
        print(json.dumps({**header, "skipped": missing}), flush=True)
        return 0
    waited_s = wait_for_quiet(SCRIPT, 30.0)
    started = time.monotonic()
    results, background = measure(max(1, args.runs), max(0, args.warmup))
    report = {
        **report_header(SCRIPT, mode, waited_s, background),
        "spec": "one sleep stage (1 ms), server load 100 q/s for 1 s, no warm-up, solo only",
        "runs_per_launcher": args.runs,
        "warmup_runs": args.warmup,
        "celery": summarise(results["celery"]),
        "default": summarise(results["default"]),
        "celery_extra_s": celery_extra(results),
        "method": (
            "wall clock of one host; median and 95% percentile-bootstrap interval (10,000 "
            "resamples, seed 0); celery_extra_s: median(celery) - median(default), each "
            "launcher's runs resampled on their own; runs submitted one after another, each "
            f"awaited; {args.warmup} warm-up run(s) per launcher not counted; instance "
            "identical but for the run launcher (Celery worker vs the code server's subprocess)"
        ),
        "total_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report), flush=True)
    return 0 if all(results[launcher]["samples"] for launcher in LAUNCHERS) else 1


if __name__ == "__main__":
    sys.exit(main())

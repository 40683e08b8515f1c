"""The scale-out tests' cluster: `python -m bench_defs.cluster up --workers 2` under a folder of
its own in /tmp (Postgres, run as its own account when the tests run as root, must reach it;
pytest's base folder is private to root), the tiny spec partition added, host-a given a fake
GPU, and helpers to submit runs and read their records from the Postgres instance."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench_defs.cluster.layout import Layout
from bench_defs.cluster.procs import load_state
from tests.dagster.cluster_faults import FAKE_GPU_HOST, GPU, script_fake_gpu
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO

UP_TIMEOUT_S = 420.0
PARTITION = "tiny"
LONG = "long"
"""A partition whose benchmark measures for two minutes (to be cancelled)."""


@dataclass
class Cluster:
    """A cluster the session brought up, and how long `up` took."""

    base: Path
    env: dict[str, str]
    up_s: float

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def layout(self) -> Layout:
        return Layout(self.home / "cluster")

    @property
    def url(self) -> str:
        url = load_state(self.layout.state).webserver_url
        assert url is not None
        return url

    def cli(self, *args: str, timeout_s: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench_defs.cluster", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )

    def benchmark_processes(self, host: str) -> list[psutil.Process]:
        """Processes of `host`'s benchmarks: its COLLOBENCH_HOME, outside its worker's group."""
        state = load_state(self.layout.state)
        worker = next(record for record in state.processes if record.name == f"worker-{host}")
        home = str(self.layout.host_home(host))
        found = []
        for process in self.processes():
            try:
                if process.environ().get("COLLOBENCH_HOME") == home and (
                    os.getpgid(process.pid) != worker.pgid
                ):
                    found.append(process)
            except (psutil.Error, ProcessLookupError):
                continue
        return found

    def processes(self) -> list[psutil.Process]:
        """Every live process whose environment names this cluster's folder."""
        found = []
        for process in psutil.process_iter(["pid"]):
            try:
                environ = process.environ()
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
            except psutil.Error:
                continue
            values = (environ.get("COLLOBENCH_HOME", ""), environ.get("DAGSTER_HOME", ""))
            if any(value.startswith(str(self.base)) for value in values):
                found.append(process)
        return found


def start_cluster(workers: int = 2) -> Cluster:
    base = Path(tempfile.mkdtemp(prefix="collobench-cluster-"))
    base.chmod(base.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    specs = base / "specs"
    write_spec(specs, PARTITION, tiny_spec(PARTITION))
    long_spec = tiny_spec(LONG)
    long_spec["pipelines"][0]["loadgen"] |= {"duration_s": 120, "timeout_s": 240}
    write_spec(specs, LONG, long_spec)
    gpu_spec = tiny_spec(GPU)
    gpu_spec["pipelines"][0]["device"] = "cuda:0"
    write_spec(specs, GPU, gpu_spec)
    script_fake_gpu(Layout(base / "home" / "cluster"), FAKE_GPU_HOST, [])
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env |= {
        "COLLOBENCH_HOME": str(base / "home"),
        "COLLOBENCH_SPECS_DIR": str(specs),
        "COLLOBENCH_MLFLOW": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("COLLOBENCH_POOLS_FILE", None)
    cluster = Cluster(base, env, 0.0)
    started = time.monotonic()
    done = cluster.cli("up", "--workers", str(workers))
    cluster.up_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return cluster


def instance(cluster: Cluster) -> Any:
    """The cluster's Dagster instance (Postgres), opened from this process."""
    import dagster as dg

    return dg.DagsterInstance.from_config(str(cluster.layout.dagster_home))


def log_text(cluster: Cluster) -> str:
    return "\n".join(
        path.read_text(encoding="utf-8", errors="replace")
        for path in sorted(cluster.layout.logs.glob("*.log"))
    )

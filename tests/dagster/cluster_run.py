"""The scale-out tests' cluster: `python -m bench_defs.cluster up --workers 2` under a folder of
its own in /tmp (Postgres, run as its own account when the tests run as root, must reach it;
pytest's base folder is private to root), the tiny spec partition added, host-a given a fake
GPU, a two-pipeline spec for a capacity region, and helpers to submit runs and read their
records from the Postgres instance and the hosts' shared warehouse."""

from __future__ import annotations

import copy
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
from stages.settings import RESULTS_DIR_ENV
from tests.dagster.cluster_faults import FAKE_GPU_HOST, GPU, script_fake_gpu
from tests.dagster.server import ENDED
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO

UP_TIMEOUT_S = 420.0
PARTITION = "tiny"
LONG = "long"
"""A partition whose benchmark measures for two minutes (to be cancelled)."""
REGION = "pair"
"""A spec of two sleep pipelines (`a`, `b`) with an SLO: a capacity region's spec."""
REGION_SEARCH = {"percentile": 0.9, "max_probes": 2, "probe_s": 1.0}
"""Every search of the test's region: the ceiling probe and one more (a solo search), or two
(a ray), of 1 s each; p90 is decidable from 44 queries."""


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
    def results(self) -> Path:
        """The folder every host writes runs and searches to, and its warehouse."""
        return self.layout.root / "results"

    @property
    def results_env(self) -> dict[str, str]:
        """The environment of a `collobench` command that reads the cluster's results."""
        return {**self.env, RESULTS_DIR_ENV: str(self.results), "COLUMNS": "250"}

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


def region_spec() -> dict[str, Any]:
    """The tiny spec with two pipelines `a` and `b`, each with an SLO (a capacity target)."""
    spec = tiny_spec(REGION)
    (pipeline,) = spec["pipelines"]
    pipeline["loadgen"]["slo_ms"] = 200
    spec["pipelines"] = [copy.deepcopy(pipeline) | {"name": name} for name in ("a", "b")]
    return spec


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
    write_spec(specs, REGION, region_spec())
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    env |= {
        "COLLOBENCH_HOME": str(base / "home"),
        "COLLOBENCH_SPECS_DIR": str(specs),
        "COLLOBENCH_MLFLOW": "0",
        "COLLOBENCH_SENSOR_INTERVAL_S": "5",  # the region sensor's ticks, 5 s apart
        "PYTHONPATH": str(REPO),
    }
    env.pop("COLLOBENCH_POOLS_FILE", None)
    env.pop(RESULTS_DIR_ENV, None)  # `up` sets the cluster's own
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


def warehouse_rows(cluster: Cluster, query: str) -> list[tuple[Any, ...]]:
    """The rows of a query on the hosts' shared warehouse, read-only."""
    from analysis.warehouse.reader import connect_read_only

    connection = connect_read_only(cluster.results / "results.duckdb")
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


def await_region(cluster: Cluster, identifier: str, runs: int, timeout_s: float) -> dict[str, Any]:
    """Poll the runs of a region request (its tag) until `runs` of them exist and all ended, or
    all that exist ended and one failed (the rays never come then); run id -> record."""
    from dagster import RunsFilter

    from bench_defs.capacity.assets import REGION_TAG

    deadline = time.monotonic() + timeout_s
    with instance(cluster) as dagster_instance:
        while True:
            records = dagster_instance.get_run_records(RunsFilter(tags={REGION_TAG: identifier}))
            statuses = [record.dagster_run.status.value for record in records]
            ended = bool(records) and all(status in ENDED for status in statuses)
            if ended and (len(records) >= runs or set(statuses) != {"SUCCESS"}):
                return {record.dagster_run.run_id: record for record in records}
            assert time.monotonic() < deadline, f"region runs: {statuses}, wanted {runs}"
            time.sleep(1.0)


@dataclass
class RegionSearches:
    """The region's searches: search id -> the host its Dagster run's pool names (expected)
    and the hosts of its probes' runs in the shared warehouse (recorded); the region id."""

    expected: dict[str, set[str]]
    recorded: dict[str, set[str]]
    region_id: str


def region_search_hosts(
    cluster: Cluster, identifier: str, by_key: dict[str, Any], hosts: dict[str, str]
) -> RegionSearches:
    """Which host each of the region's searches should have run on (`by_key`: partition key ->
    run record; `hosts`: pool -> host), and where the warehouse says their probes ran."""
    from bench_defs.capacity.keys import (
        parse_capacity_key,
        ray_search_id,
        region_id_of,
        search_id_of,
    )
    from bench_defs.core.pools import POOL_TAG

    found = RegionSearches({}, {}, "")
    for key, record in by_key.items():
        target, run = parse_capacity_key(key), record.dagster_run
        host = {hosts[run.tags[POOL_TAG]]}
        if target.ray is not None:
            found.region_id = region_id_of(target, identifier)
            found.expected[ray_search_id(found.region_id, target.ray)] = host
        else:
            found.expected[search_id_of(target, run.root_run_id or run.run_id)] = host
    run_hosts = dict(warehouse_rows(cluster, "SELECT run_id, host FROM runs"))
    for search_id, run_dir in warehouse_rows(
        cluster, "SELECT search_id, run_dir FROM capacity_probes"
    ):
        if search_id in found.expected and run_dir:
            ran_on = str(run_hosts.get(Path(run_dir).name, "not loaded"))
            found.recorded.setdefault(search_id, set()).add(ran_on)
    return found

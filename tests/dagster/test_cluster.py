"""The Celery mode as it runs: `python -m bench_defs.cluster up` with two worker hosts
(Postgres on a unix socket, Redis on loopback, code server, webserver, daemon, Celery workers);
benchmark runs submitted through GraphQL with the pool tags of host-a and host-b; each lands on
its host, never more than a pool's limit runs at once, both hosts work at the same time, nothing
says "database is locked", and their results load into the one warehouse of the hosts' shared
results folder (`collobench compare` across hosts); a capacity region's searches run on both
hosts at once and assemble complete; then `down` leaves no process. One cluster for the
module."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
import pytest

from bench_defs.capacity.assets import TARGET_TAG
from bench_defs.core.pools import POOL_TAG, Pool, load_pools, pool_tags
from bench_defs.core.specs import MAX_RUNTIME_TAG, SPEC_PARTITIONS
from stages.capacity.region_store import read_region
from tests.dagster import cluster_faults as faults
from tests.dagster.cluster_run import (
    LONG,
    PARTITION,
    REGION,
    REGION_SEARCH,
    Cluster,
    await_region,
    instance,
    log_text,
    region_search_hosts,
    start_cluster,
    warehouse_rows,
)
from tests.dagster.server import ENDED, LOCATION
from tests.helpers import REPO, foreign_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.spawns]

RUNS_PER_POOL = 3
RUNS_TIMEOUT_S = 420.0
ACTIVE = frozenset({"STARTING", "STARTED", "CANCELING"})


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cluster = start_cluster(workers=2)
    print(f"cluster up in {cluster.up_s:.1f} s")
    try:
        with instance(cluster) as dagster_instance:
            dagster_instance.add_dynamic_partitions(SPEC_PARTITIONS, [PARTITION, LONG])
        yield cluster
    finally:
        cluster.cli("down", timeout_s=120)
        if not cluster.processes():
            shutil.rmtree(cluster.base, ignore_errors=True)


def _client(cluster: Cluster) -> Any:
    from dagster_graphql import DagsterGraphQLClient

    address = urlparse(cluster.url)
    return DagsterGraphQLClient(str(address.hostname), port_number=address.port)


BENCHMARK_ONLY = ["benchmark_run"]
"""The asset selection of a run that needs no warehouse load or reports (a few seconds less)."""
WAREHOUSE_ONLY = ["benchmark_run", "warehouse"]
"""A run loaded into the warehouse, without the report assets."""


def _submit(
    client: Any, pool: Pool, partition: str = PARTITION, assets: list[str] | None = None
) -> str:
    return str(
        client.submit_job_execution(
            "benchmark_job",
            repository_location_name=LOCATION,
            run_config={},
            tags={"dagster/partition": partition, **pool_tags(pool)},
            asset_selection=assets,
        )
    )


def _await_runs(cluster: Cluster, run_ids: list[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """Poll the runs until all ended; (run id -> record, pool -> most runs active at once)."""
    from dagster import RunsFilter

    most: dict[str, int] = {}
    deadline = time.monotonic() + RUNS_TIMEOUT_S
    with instance(cluster) as dagster_instance:
        while True:
            records = dagster_instance.get_run_records(RunsFilter(run_ids=run_ids))
            active: dict[str, int] = {}
            for record in records:
                if record.dagster_run.status.value in ACTIVE:
                    pool = record.dagster_run.tags[POOL_TAG]
                    active[pool] = active.get(pool, 0) + 1
            for pool, count in active.items():
                most[pool] = max(most.get(pool, 0), count)
            if all(record.dagster_run.status.value in ENDED for record in records):
                return {record.dagster_run.run_id: record for record in records}, most
            statuses = sorted(record.dagster_run.status.value for record in records)
            assert time.monotonic() < deadline, f"runs not ended: {statuses}"
            time.sleep(0.5)


def _failures(cluster: Cluster, run_ids: list[str]) -> str:
    """The failure messages in these runs' event logs (what a failed assertion shows)."""
    lines = []
    with instance(cluster) as dagster_instance:
        for run_id in run_ids:
            for entry in dagster_instance.all_logs(run_id):
                event = entry.dagster_event
                if event is not None and event.is_failure:
                    error = getattr(event.event_specific_data, "error", None)
                    lines.append(f"{run_id[:8]} {event.step_key}: {error or entry.message}"[:800])
    return "\n".join(lines)


def _run_dir(cluster: Cluster, run_id: str) -> Path:
    """The run's directory in the folder every host writes to (COLLOBENCH_RESULTS_DIR)."""
    found = list((cluster.results / "runs").glob(f"*-{run_id[:8]}"))
    assert len(found) == 1, f"run {run_id} not in {cluster.results / 'runs'}: {found}"
    return found[0]


def _overlap(first: tuple[float, float], second: tuple[float, float]) -> bool:
    return first[0] < second[1] and second[0] < first[1]


def test_runs_land_on_their_hosts_within_pool_limits(cluster: Cluster) -> None:
    pools = load_pools(cluster.layout.root / "pools.yaml")
    assert [pool.name for pool in pools] == ["host-a", "host-b"]
    client = _client(cluster)
    # each host's first run is the whole job (its reports read their own run's benchmark), the
    # others stop after the warehouse load (the reports' few seconds, twice per host, saved)
    submitted = [
        (pool, _submit(client, pool, assets=None if index == 0 else WAREHOUSE_ONLY))
        for index in range(RUNS_PER_POOL)
        for pool in pools
    ]
    records, most = _await_runs(cluster, [run_id for _, run_id in submitted])
    failed = [
        run_id for run_id, rec in records.items() if rec.dagster_run.status.value != "SUCCESS"
    ]
    assert failed == [], _failures(cluster, failed)
    assert most == {"host-a": 1, "host-b": 1}
    measured: dict[str, list[tuple[float, float]]] = {"host-a": [], "host-b": []}
    spans: dict[str, list[tuple[float, float]]] = {"host-a": [], "host-b": []}
    for pool, run_id in submitted:
        manifest = json.loads((_run_dir(cluster, run_id) / "manifest.json").read_text())
        assert manifest["host"] == pool.host
        started, ended = (
            datetime.fromisoformat(manifest[key]).timestamp() for key in ("started_at", "ended_at")
        )
        measured[pool.name].append((started, ended))
        record = records[run_id]
        spans[pool.name].append((record.start_time, record.end_time))
    for intervals in measured.values():  # one device per host: its benchmarks never overlap
        ordered = sorted(intervals)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)), ordered
    # and the two hosts worked at the same time (their Dagster runs overlap)
    assert any(_overlap(a, b) for a in spans["host-a"] for b in spans["host-b"])
    assert "database is locked" not in log_text(cluster)


def test_both_hosts_results_load_into_one_warehouse(cluster: Cluster) -> None:
    from dagster import DagsterRunStatus, RunsFilter

    with instance(cluster) as dagster_instance:
        runs = dagster_instance.get_runs(
            RunsFilter(
                job_name="benchmark_job",
                tags={"dagster/partition": PARTITION},
                statuses=[DagsterRunStatus.SUCCESS],
            )
        )
    hosts = {pool.name: pool.host for pool in load_pools(cluster.layout.root / "pools.yaml")}
    wanted = {run.run_id[:8]: hosts[run.tags[POOL_TAG]] for run in runs}
    rows = warehouse_rows(cluster, f"SELECT run_id, host FROM runs WHERE name = '{PARTITION}'")
    loaded = {run_id.rsplit("-", 1)[-1]: host for run_id, host in rows}
    assert len(rows) == len(runs) == 2 * RUNS_PER_POOL  # the first test's runs, every one
    assert loaded == wanted and set(loaded.values()) == {"host-a", "host-b"}
    run_a = next(run_id for run_id, host in rows if host == "host-a")
    run_b = next(run_id for run_id, host in rows if host == "host-b")
    done = subprocess.run(
        [sys.executable, "-m", "stages.cli", "compare", run_a, run_b],
        cwd=REPO,
        env=cluster.results_env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert f"{run_b} (B, host host-b) against {run_a} (A, host host-a)" in text, text


def test_a_capacity_region_runs_on_both_hosts_at_once(cluster: Cluster) -> None:
    from bench_defs.capacity.region_requests import RegionRequest, request_id, write_region_request

    request = RegionRequest(spec=REGION, pipelines=("a", "b"), rays=2, search=REGION_SEARCH)
    path = write_region_request(cluster.results / "capacity", request)  # the sensor acts on it
    identifier = request_id(path, path.read_text())
    records = await_region(cluster, identifier, runs=4, timeout_s=RUNS_TIMEOUT_S)
    failed = [
        run_id for run_id, rec in records.items() if rec.dagster_run.status.value != "SUCCESS"
    ]
    assert failed == [], _failures(cluster, failed)
    hosts = {pool.name: pool.host for pool in load_pools(cluster.layout.root / "pools.yaml")}
    by_key = {rec.dagster_run.tags[TARGET_TAG]: rec for rec in records.values()}
    solos, rays = request.keys()[:2], request.keys()[2:]
    assert sorted(by_key) == sorted(solos + rays)
    for keys in (solos, rays):  # round-robin: each pair on both hosts
        assert {by_key[key].dagster_run.tags[POOL_TAG] for key in keys} == {"host-a", "host-b"}
    spans = [
        (rec.dagster_run.tags[POOL_TAG], rec.start_time, rec.end_time) for rec in records.values()
    ]
    assert any(a[0] != b[0] and _overlap(a[1:], b[1:]) for a in spans for b in spans), spans
    searches = region_search_hosts(cluster, identifier, by_key, hosts)
    assert searches.recorded == searches.expected  # each probe ran on its run's host
    region_dir = cluster.results / "capacity" / searches.region_id
    region = read_region(region_dir)
    assert region is not None and region.complete and len(region.rays) == 2, region
    # the last ray to finish wrote the complete region's report and plot
    assert "capacity region" in (region_dir / "report.md").read_text().lower()
    assert (region_dir / "region_plot.png").stat().st_size > 0
    rays_loaded = warehouse_rows(
        cluster,
        f"SELECT count(*) FROM capacity_region_rays WHERE region_id = '{searches.region_id}'",
    )
    assert rays_loaded == [(2,)]


def _wait_for(cluster: Cluster, run_ids: list[str], wanted: dict[str, int]) -> None:
    """Wait until at least `wanted[status]` of the runs have each status."""
    from dagster import RunsFilter

    deadline = time.monotonic() + RUNS_TIMEOUT_S
    with instance(cluster) as dagster_instance:
        while True:
            runs = dagster_instance.get_runs(RunsFilter(run_ids=run_ids))
            counts = [run.status.value for run in runs]
            if all(counts.count(status) >= n for status, n in wanted.items()):
                return
            assert time.monotonic() < deadline, f"runs {counts}, not {wanted}"
            time.sleep(0.5)


def test_daemon_restarted_mid_queue_loses_no_run(cluster: Cluster) -> None:
    host_a = load_pools(cluster.layout.root / "pools.yaml")[0]
    client = _client(cluster)
    run_ids = [_submit(client, host_a, assets=BENCHMARK_ONLY) for _ in range(2)]
    _wait_for(cluster, run_ids, {"STARTED": 1, "QUEUED": 1})
    done = cluster.cli("restart-daemon", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    records, most = _await_runs(cluster, run_ids)
    assert {record.dagster_run.status.value for record in records.values()} == {"SUCCESS"}
    assert most == {"host-a": 1}
    for run_id in run_ids:
        _run_dir(cluster, run_id)


def test_a_cancelled_run_leaves_no_process_on_its_worker(cluster: Cluster) -> None:
    host_b = load_pools(cluster.layout.root / "pools.yaml")[1]
    client = _client(cluster)
    run_id = _submit(client, host_b, LONG, BENCHMARK_ONLY)
    deadline = time.monotonic() + RUNS_TIMEOUT_S
    while not cluster.benchmark_processes(host_b.host):
        status = client.get_run_status(run_id).value
        assert status not in ENDED, _failures(cluster, [run_id])
        assert time.monotonic() < deadline, "the long benchmark never started"
        time.sleep(0.5)
    client.terminate_run(run_id)
    records, _ = _await_runs(cluster, [run_id])
    # The revoke's SIGTERM interrupts the run in the worker; Dagster records the run as failed
    # ("no user initiated termination request was found") or cancelled, by timing.
    assert records[run_id].dagster_run.status.value in {"CANCELED", "FAILURE"}
    deadline = time.monotonic() + 30
    while cluster.benchmark_processes(host_b.host):
        assert time.monotonic() < deadline, cluster.benchmark_processes(host_b.host)
        time.sleep(0.5)
    # the worker and the host's device lock are free again
    after = _submit(client, host_b, assets=BENCHMARK_ONLY)
    records, _ = _await_runs(cluster, [after])
    assert records[after].dagster_run.status.value == "SUCCESS"


KILLED_RUN_FAILED_S = 60.0
"""A crashed worker's run is failed by run monitoring's health check (two missed polls, 5 s
apart), long before its max runtime."""
ORPHAN_GONE_S = 30.0


def test_a_worker_killed_mid_run_fails_the_run_and_leaves_no_orphan(cluster: Cluster) -> None:
    host_b = load_pools(cluster.layout.root / "pools.yaml")[1]
    client = _client(cluster)
    run_id = _submit(client, host_b, LONG, BENCHMARK_ONLY)
    benchmark = faults.await_benchmark(
        cluster, host_b.host, lambda: client.get_run_status(run_id).value in ENDED
    )
    worker = faults.worker_record(cluster, host_b.host)
    watched = faults.watched_pids(benchmark)  # the pool process that runs the Pipes client
    assert len(watched) == 1 and psutil.Process(watched.pop()).ppid() == worker.pid
    killed = faults.crash_worker(worker)
    crashed = time.monotonic()
    assert worker.pid in killed and not {p.pid for p in benchmark} & set(killed)
    # waits behind the pool limit, then for a worker
    queued = _submit(client, host_b, assets=BENCHMARK_ONLY)
    records, _ = _await_runs(cluster, [run_id])
    failed_s = time.monotonic() - crashed
    print(f"the killed worker's run failed {failed_s:.1f} s after the crash")
    run = records[run_id].dagster_run
    assert run.status.value == "FAILURE"
    assert failed_s < min(KILLED_RUN_FAILED_S, float(run.tags[MAX_RUNTIME_TAG]))
    message, resumed = faults.run_failure(cluster, run_id)
    assert "does not answer" in message and resumed == 0  # the health check's, never resumed
    deadline = time.monotonic() + ORPHAN_GONE_S
    while cluster.benchmark_processes(host_b.host):
        assert time.monotonic() < deadline, cluster.benchmark_processes(host_b.host)
        time.sleep(0.5)
    manifest = json.loads((_run_dir(cluster, run_id) / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert any("parent died" in warning for warning in manifest["warnings"])
    assert faults.lock_is_free(cluster.layout.host_home(host_b.host) / "locks" / "device-cpu.lock")
    done = cluster.cli("restart-worker", host_b.host, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    records, _ = _await_runs(cluster, [queued])
    assert records[queued].dagster_run.status.value == "SUCCESS", _failures(cluster, [queued])


def test_a_foreign_process_on_a_hosts_gpu_makes_the_preflight_refuse(cluster: Cluster) -> None:
    host_a = load_pools(cluster.layout.root / "pools.yaml")[0]
    assert host_a.host == faults.FAKE_GPU_HOST
    client = _client(cluster)
    with instance(cluster) as dagster_instance:
        dagster_instance.add_dynamic_partitions(SPEC_PARTITIONS, [faults.GPU])
    with foreign_process() as foreign:
        try:
            faults.script_fake_gpu(cluster.layout, host_a.host, [foreign])
            busy = _submit(client, host_a, faults.GPU, BENCHMARK_ONLY)
            records, _ = _await_runs(cluster, [busy])
        finally:
            faults.script_fake_gpu(cluster.layout, host_a.host, [])
    assert records[busy].dagster_run.status.value == "FAILURE"
    line = f"pid {foreign} (sleep) on GPU 0"
    failures = _failures(cluster, [busy])
    assert f"device_busy: refused before measuring: foreign compute process on the GPU: {line}" in (
        failures
    ), failures
    manifest = json.loads((_run_dir(cluster, busy) / "manifest.json").read_text())
    assert manifest["status"] == "device_busy" and manifest["host"] == host_a.host
    assert manifest["results"] == [] and manifest["timeline"] == []  # nothing measured
    assert any(line in warning for warning in manifest["warnings"])
    # the same GPU, the stranger gone: it runs
    after = _submit(client, host_a, faults.GPU, BENCHMARK_ONLY)
    records, _ = _await_runs(cluster, [after])
    assert records[after].dagster_run.status.value == "SUCCESS", _failures(cluster, [after])


def test_status_names_every_process(cluster: Cluster) -> None:
    done = cluster.cli("status", timeout_s=60)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("postgres", "redis", "code-server", "webserver", "daemon", "worker-host-a"):
        assert f"{name} " in done.stdout and "gone" not in done.stdout


def test_down_leaves_no_process(cluster: Cluster) -> None:
    assert cluster.processes(), "the cluster's processes carry its COLLOBENCH_HOME"
    done = cluster.cli("down", timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cluster.processes() == []
    assert cluster.cli("status", timeout_s=60).returncode == 1

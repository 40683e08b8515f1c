"""`up`, `down` and `status` of the cluster (the CLI in `__main__` calls these)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench_defs.cluster import dagster_procs as dp
from bench_defs.cluster import services
from bench_defs.cluster.instance_config import write_instance, write_pools, write_workspace
from bench_defs.cluster.layout import POSTGRES_URL_ENV, REDIS_URL_ENV, Layout
from bench_defs.cluster.procs import (
    ClusterError,
    ClusterState,
    ProcRecord,
    alive,
    load_state,
    save_state,
)
from bench_defs.core.pools import DEFAULT_QUEUE, Pool, load_pools, pools_file
from stages.process_groups import group_alive, signal_group

STOP_GRACE_S = 15.0
DEFAULT_WORKER = Pool(name="default", queue=DEFAULT_QUEUE, host="control", devices=1)
"""With `--default-worker`: a worker on dagster-celery's default queue for untagged runs."""


def _started(layout: Layout, state: ClusterState, record: ProcRecord) -> ProcRecord:
    state.processes.append(record)
    save_state(layout.state, state)
    return record


def _ensure_schema(dagster_home: Path) -> None:
    """Open the instance once, so one process creates Dagster's tables (and a bad
    dagster.yaml fails here, in one line)."""
    import dagster as dg

    try:
        with dg.DagsterInstance.from_config(str(dagster_home)):
            pass
    except Exception as error:
        raise ClusterError(f"the Dagster instance does not open: {error}") from error


def _backing_services(layout: Layout, state: ClusterState) -> None:
    """Postgres and Redis: the ones named by env, else started here."""
    state.postgres_url = os.environ.get(POSTGRES_URL_ENV)
    if not state.postgres_url:
        _started(layout, state, services.start_postgres(layout))
        state.postgres_url = services.postgres_url(layout)
    state.redis_url = os.environ.get(REDIS_URL_ENV)
    if not state.redis_url:
        record, state.redis_url = services.start_redis(layout)
        _started(layout, state, record)
    save_state(layout.state, state)


def _dagster_side(layout: Layout, state: ClusterState, pools: list[Pool]) -> None:
    """Code server, webserver, daemon and one worker per pool, started together and then
    awaited."""
    assert state.redis_url is not None
    env = dp.dagster_env(layout, pools_file())
    grpc_port, web_port = services.free_port(), services.free_port()
    write_workspace(layout.workspace, grpc_port)
    state.webserver_url = f"http://127.0.0.1:{web_port}"
    code = _started(layout, state, dp.start_code_server(layout, env, grpc_port))
    web = _started(layout, state, dp.start_webserver(layout, env, web_port))
    daemon = _started(layout, state, dp.start_daemon(layout, env))
    workers = []
    for pool in pools:
        if pool.queue in state.queues.values():
            continue  # one worker per queue
        worker = dp.worker_env(layout, env, pool, state.redis_url)
        workers.append(_started(layout, state, dp.start_worker(layout, worker, pool)))
        state.queues[pool.host] = pool.queue
    save_state(layout.state, state)
    dp.wait_code_server(code, grpc_port)
    dp.wait_webserver(web, state.webserver_url)
    dp.wait_daemon(daemon, state.webserver_url)
    for record in workers:
        dp.wait_worker(record)


def up(
    layout: Layout, workers: int, default_worker: bool, launcher: str = "celery"
) -> ClusterState:
    """Start everything; on any failure stop what started and raise ClusterError. With
    `launcher="default"` runs go out through Dagster's DefaultRunLauncher (a subprocess of the
    code server each) and no worker starts; the pools (and their run limits) stay."""
    previous = load_state(layout.state)
    if any(alive(record) for record in previous.processes):
        raise ClusterError(f"already up ({layout.root}); run `down` first")
    for folder in (layout.root, layout.logs, layout.dagster_home, layout.results):
        folder.mkdir(parents=True, exist_ok=True)
    for log in layout.logs.glob("*.log"):
        log.unlink()  # each up starts fresh logs (readiness reads them)
    state = ClusterState(launcher=launcher, results_dir=str(layout.results))
    save_state(layout.state, state)
    try:
        _backing_services(layout, state)
        assert state.postgres_url is not None and state.redis_url is not None
        pools = write_pools(pools_file(), workers)
        write_instance(layout.dagster_home, state.postgres_url, state.redis_url, pools, launcher)
        _ensure_schema(layout.dagster_home)
        served = [*pools, *([DEFAULT_WORKER] if default_worker else [])]
        _dagster_side(layout, state, served if launcher == "celery" else [])
    except BaseException:
        down(layout)
        raise
    return state


def _signal_groups(records: list[ProcRecord], signum: int) -> None:
    for record in records:
        if alive(record) or group_alive(record.pgid):  # never a stranger's reused pid
            signal_group(record.pgid, signum)


def _wait(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.2)


def stop_records(records: list[ProcRecord], grace_s: float) -> None:
    """SIGTERM every group at once, wait up to `grace_s`, SIGKILL what is left."""

    def gone() -> bool:
        return not any(alive(record) or group_alive(record.pgid) for record in records)

    _signal_groups(records, signal.SIGTERM)
    _wait(gone, grace_s)
    _signal_groups(records, signal.SIGKILL)
    _wait(gone, 5.0)


def host_processes(layout: Layout) -> list[psutil.Process]:
    """Processes left from the workers' benchmarks (their COLLOBENCH_HOME is a host's home):
    a Pipes child leads a session of its own, so the worker's group does not hold it."""
    prefix = str(layout.root / "hosts") + os.sep
    found = []
    for process in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            home = process.environ().get("COLLOBENCH_HOME", "")
            if home.startswith(prefix) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def down(layout: Layout) -> list[str]:
    """Stop every recorded process by group (Postgres with `pg_ctl stop -m fast` first in
    its turn), then any benchmark process left under a host's home; returns the names."""
    state = load_state(layout.state)
    others = [record for record in state.processes if record.name not in ("postgres", "redis")]
    stop_records(others, STOP_GRACE_S)
    for process in host_processes(layout):
        with contextlib.suppress(OSError):
            signal_group(os.getpgid(process.pid), signal.SIGKILL)
    if any(record.name == "postgres" for record in state.processes):
        services.stop_postgres(layout)
    backing = [record for record in state.processes if record.name in ("postgres", "redis")]
    stop_records(backing, STOP_GRACE_S)
    if layout.root.is_dir():
        save_state(layout.state, ClusterState())
    return [record.name for record in state.processes]


def restart_daemon(layout: Layout) -> ProcRecord:
    """Stop the daemon by group and start a new one (runs queued meanwhile stay queued)."""
    state = load_state(layout.state)
    old = [record for record in state.processes if record.name == "daemon"]
    if not old or state.webserver_url is None:
        raise ClusterError(f"no daemon recorded in {layout.state}")
    stop_records(old, STOP_GRACE_S)
    record = dp.start_daemon(layout, dp.dagster_env(layout, pools_file()))
    state.processes = [item for item in state.processes if item.name != "daemon"] + [record]
    save_state(layout.state, state)
    dp.wait_daemon(record, state.webserver_url)
    return record


def restart_worker(layout: Layout, host: str) -> ProcRecord:
    """Start `host`'s worker again (after a crash; a running one is first stopped by group):
    the same queue, home and host id, so the host takes the next run. A run its dead worker
    held is failed by run monitoring (`launcher`), never resumed."""
    state = load_state(layout.state)
    name = f"worker-{host}"
    old = [record for record in state.processes if record.name == name]
    pools = [*load_pools(pools_file()), DEFAULT_WORKER]
    pool = next((pool for pool in pools if pool.host == host), None)
    if not old or pool is None or state.redis_url is None:
        raise ClusterError(f"no worker of host {host!r} recorded in {layout.state}")
    stop_records(old, STOP_GRACE_S)
    offset = Path(old[0].log).stat().st_size if Path(old[0].log).is_file() else 0
    env = dp.worker_env(layout, dp.dagster_env(layout, pools_file()), pool, state.redis_url)
    record = dp.start_worker(layout, env, pool)
    state.processes = [item for item in state.processes if item.name != name] + [record]
    save_state(layout.state, state)
    dp.wait_worker(record, offset)
    return record


def status_lines(layout: Layout) -> tuple[list[str], bool]:
    """One line per recorded process (`name pid running|gone`) and the URLs; whether all run."""
    state = load_state(layout.state)
    if not state.processes:
        return [f"not up ({layout.root})"], False
    lines = [
        f"{record.name:<16} pid {record.pid:<8} {'running' if alive(record) else 'gone'}"
        for record in state.processes
    ]
    lines += [f"webserver {state.webserver_url}", f"redis {state.redis_url}"]
    lines += [f"postgres {state.postgres_url}", f"launcher {state.launcher}"]
    lines += [f"results {state.results_dir}"]
    lines += [f"queue {queue} -> host {host}" for host, queue in state.queues.items()]
    return lines, all(alive(record) for record in state.processes)

"""Faults for the cluster tests: a worker crashed with SIGKILL, a stranger's process on a fake
GPU; and what to look at afterwards (the pid the benchmark watches, the device lock, the
run's failure message)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from bench_defs.cluster.dagster_procs import FAKE_NVML_FILE
from bench_defs.cluster.layout import Layout
from bench_defs.cluster.procs import ProcRecord, load_state
from stages.settings import PARENT_PID_ENV

if TYPE_CHECKING:
    from tests.dagster.cluster_run import Cluster

START_TIMEOUT_S = 420.0
GPU = "gpu"
"""A partition: the tiny spec on `cuda:0`, for the fake GPU of FAKE_GPU_HOST."""
FAKE_GPU_HOST = "host-a"


def script_fake_gpu(layout: Layout, host: str, pids: list[int]) -> None:
    """`host`'s fake GPU (read by each run's pre-flight and samplers) with these foreign
    compute processes; the file must exist when `up` starts the host's worker."""
    processes = [{"pid": pid, "used_memory_mib": 64} for pid in pids]
    script = layout.host_home(host) / FAKE_NVML_FILE
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps({"devices": [{"uuid": "GPU-fake-0", "processes": processes}]}))


def worker_record(cluster: Cluster, host: str) -> ProcRecord:
    state = load_state(cluster.layout.state)
    return next(record for record in state.processes if record.name == f"worker-{host}")


def await_benchmark(cluster: Cluster, host: str, ended: Callable[[], bool]) -> list[psutil.Process]:
    """Wait until `host` runs benchmark processes (failing when the run ended first)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (found := cluster.benchmark_processes(host)):
        assert not ended(), "the run ended before its benchmark started"
        assert time.monotonic() < deadline, "the benchmark never started"
        time.sleep(0.5)
    return found


def watched_pids(processes: list[psutil.Process]) -> set[int]:
    """The pids the benchmark's ParentWatch watches (`COLLOBENCH_PARENT_PID`)."""
    watched = set()
    for process in processes:
        with contextlib.suppress(psutil.Error):
            value = process.environ().get(PARENT_PID_ENV)
            if value:
                watched.add(int(value))
    return watched


def crash_worker(record: ProcRecord) -> list[int]:
    """SIGKILL the worker as a crash would: its main process and pool processes (its process
    group), not the benchmark (a session of its own); the pids killed."""
    members = []
    for process in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            alive = process.info["status"] != psutil.STATUS_ZOMBIE
            if alive and os.getpgid(process.pid) == record.pgid:
                members.append(process.pid)
    for pid in sorted(members, key=lambda pid: pid != record.pid):  # the main process first
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return members


def lock_is_free(lock: Path) -> bool:
    """Nobody holds the device lock (taken and released here without waiting)."""
    with lock.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def run_failure(cluster: Cluster, run_id: str) -> tuple[str, int]:
    """The messages of the run's RUN_FAILURE events (who marked it failed, and why), and how
    often run monitoring launched a new worker to resume it."""
    from dagster import DagsterEventType
    from dagster._daemon.monitoring.run_monitoring import count_resume_run_attempts

    from tests.dagster.cluster_run import instance

    with instance(cluster) as dagster_instance:
        entries = dagster_instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE)
        message = "\n".join(entry.message for entry in entries)
        return message, count_resume_run_attempts(dagster_instance, run_id)

"""The two chains `perf/stage_overhead.py` compares (and `perf/studies/hot_path_costs.py`
decomposes): ours, `noop` stages run in this process with Parquet recording or through
`collobench run`, and a bare chain of threads joined by `queue.SimpleQueue`s; both under one
`Placement` (CPUs and scheduling policy)."""

from __future__ import annotations

import gc
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from perf import common, product_path
from perf.common import run_recorded_table
from stages.collocation.placement import SCHEDULING_POLICIES
from stages.runtime.driver import PhaseResult
from stages.spec.loadgen import LoadgenSpec
from stages.spec.models import PipelineSpec, StageSpec

SCRIPT = "stage_overhead"
"""The benchmark these runs belong to (the prefix of their progress lines)."""


def log(message: str) -> None:
    common.log(SCRIPT, message)


class Placement:
    """Restricts the calling thread, and every thread it starts meanwhile, to `cpus` (None:
    leave as is) under `scheduling_policy` (`placement.scheduling_policy`'s names; threads
    inherit it too). Stage, recorder and bare-chain threads are all started inside the block,
    so both sides of a comparison run under the same policy."""

    def __init__(self, cpus: set[int] | None, scheduling_policy: str = "other") -> None:
        self.cpus = cpus
        self.policy = SCHEDULING_POLICIES[scheduling_policy]
        self._previous: set[int] = set()
        self._previous_policy = os.sched_getscheduler(0)

    def __enter__(self) -> Placement:
        if self.cpus is not None:
            self._previous = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)
        os.sched_setscheduler(0, self.policy, os.sched_param(0))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cpus is not None:
            os.sched_setaffinity(0, self._previous)
        os.sched_setscheduler(0, self._previous_policy, os.sched_param(0))


def noop_chain(name: str, depth: int, loadgen: LoadgenSpec) -> PipelineSpec:
    stages = [
        StageSpec(
            id=f"s{index}",
            type="noop",
            outputs=[f"s{index + 1}"] if index + 1 < depth else [],
        )
        for index in range(depth)
    ]
    return PipelineSpec(name=name, loadgen=loadgen, stages=stages, error_budget=None)


def run_recorded(spec: PipelineSpec, run_dir: Path) -> tuple[PhaseResult, dict[str, np.ndarray]]:
    """Run in this process with Parquet recording; return the result and the query rows."""
    # Every run starts as a fresh worker would: default slack.
    result, table = run_recorded_table(SCRIPT, spec, run_dir, slack_ns=0)
    columns: dict[str, np.ndarray] = {}
    for name in ("query_id", "scheduled_ns", "issued_ns", "completed_ns"):
        columns[name] = table.column(name).to_numpy(zero_copy_only=False)
    columns["ok"] = pc.equal(table.column("status"), "ok").to_numpy(zero_copy_only=False)
    columns["warmup"] = table.column("warmup").to_numpy(zero_copy_only=False)
    return result, columns


def cli_issued_latencies_ns(
    spec: PipelineSpec, cpus: set[int] | None, scheduling_policy: str, work: Path
) -> np.ndarray | None:
    """`spec` through `collobench run`, its worker placed on `cpus` under the policy:
    completed_ns - issued_ns of the measured ok queries (None: the run failed, logged)."""
    placement: dict[str, Any] = {"scheduling_policy": scheduling_policy}
    if cpus is not None:
        placement["cpus"] = sorted(cpus)
    placed = spec.model_copy(update={"placement": spec.placement.model_copy(update=placement)})
    document = product_path.spec_document(spec.name, [placed])
    try:
        run_dir = product_path.run_spec(document, work, spec.name)
    except product_path.ProductPathError as error:
        log(f"{spec.name} through collobench run: {error}")
        return None
    rows = product_path.measured_queries(run_dir, spec.name)
    ok = pc.equal(rows.column("status"), "ok")
    completed = pc.filter(rows.column("completed_ns"), ok).to_numpy()
    return np.asarray(completed - pc.filter(rows.column("issued_ns"), ok).to_numpy())


def bare_chain_latencies_ns(
    depth: int, duration_s: float, warmup: int
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-loop single items through `depth` threads joined by SimpleQueues.

    Returns (head put -> last thread's stamp, previous stamp -> this stamp) per item."""
    queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(depth + 1)]

    def hop(source: queue.SimpleQueue[Any], target: queue.SimpleQueue[Any]) -> None:
        get, put = source.get, target.put
        while True:
            item = get()
            put(item)
            if item is None:
                return

    def last(source: queue.SimpleQueue[Any], target: queue.SimpleQueue[Any]) -> None:
        get, put, now = source.get, target.put, time.monotonic_ns
        while True:
            item = get()
            if item is None:
                put(None)
                return
            put(now())

    threads = [
        threading.Thread(target=hop, args=(queues[i], queues[i + 1]), daemon=True)
        for i in range(depth - 1)
    ]
    threads.append(threading.Thread(target=last, args=(queues[-2], queues[-1]), daemon=True))
    for thread in threads:
        thread.start()
    head_put, tail_get, now = queues[0].put, queues[-1].get, time.monotonic_ns
    payload = object()
    issued: list[int] = []
    done: list[int] = []
    end_ns = now() + int(duration_s * 1e9)
    gc.collect()
    gc.freeze()
    try:
        previous = now()
        while previous < end_ns:
            start = now()
            head_put(payload)
            previous = tail_get()
            issued.append(start)
            done.append(previous)
    finally:
        gc.unfreeze()
        head_put(None)
        tail_get()
        for thread in threads:
            thread.join(5)
    issued_ns = np.array(issued[warmup:], dtype=np.int64)
    done_ns = np.array(done[warmup:], dtype=np.int64)
    since_previous = np.diff(np.array(done[warmup - 1 if warmup else 0 :], dtype=np.int64))
    return done_ns - issued_ns, since_previous

"""Samples the host and each pipeline's process tree into `host_samples` rows.

Host rows (scope `host`, pipeline NULL): CPU busy % of all cores, memory in use, and
cumulative energy from RAPL package counters when readable (`rapl`), else from a
`cpu_watts_per_core` model (`model_estimate`), else NULL (never invented). Process rows
(scope `process`): CPU % of one core and RSS of a pipeline's process plus its children.
Service rows (scope `service`, pipeline = the service's name, pid = the server's): the same
for a server the benchmark started (`services:`) plus its descendants (workers it forks later
are picked up at the next refresh).
Harness rows (scope `harness`, pipeline NULL, pid = the launcher's), when a harness pid is
given: the same for the launcher and its descendants that are not pipeline workers, servers
or theirs (samplers, probes, the resource tracker), so foreign CPU = host - workers - harness.
Process trees are re-discovered at most once per `children_refresh_s` (one scan of /proc for
all trees); a process that appears in between is counted from the next refresh. A process that
exits is dropped from sampling without error.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from stages.rundir.tables import ChunkWriter
from stages.telemetry.procfs import HostReader, ProcessReader, descendants, ppid_map
from stages.telemetry.rapl import POWERCAP_ROOT, RaplReader

log = logging.getLogger(__name__)

MIB = 1024 * 1024
FLUSH_ROWS = 65_536

_COLUMNS = ("ts_ns", "pipeline", "scope", "pid", "cpu_util", "rss_mib", "energy_j", "energy_source")


@dataclass
class _Tree:
    """A process tree (a pipeline's, or the harness's): the root and the members seen at the
    last refresh, with each one's CPU seconds at the previous sample."""

    name: str | None  # the pipeline or service; None for the harness
    scope: str  # process | service | harness
    root: ProcessReader
    members: dict[int, ProcessReader] = field(default_factory=dict)
    last_cpu_s: dict[int, float] = field(default_factory=dict)

    def set_members(self, pids: set[int]) -> None:
        """Keep the readers of pids still present, open new ones, close the rest."""
        members = {self.root.pid: self.root}
        for pid in pids - {self.root.pid}:
            known = self.members.pop(pid, None)
            if known is not None:
                members[pid] = known
                continue
            with contextlib.suppress(psutil.Error):  # exited in between: nothing to add
                members[pid] = ProcessReader(psutil.Process(pid))
        for stale in self.members.values():
            if stale.pid not in members:
                stale.close()
        self.members = members

    def close(self) -> None:
        for member in {self.root.pid: self.root, **self.members}.values():
            member.close()


@dataclass
class HostSamplerResult:
    samples: int
    rows: int
    energy_j: float | None
    energy_source: str | None  # rapl | model_estimate | None
    dropped_pipelines: list[str]


class HostSampler:
    """Host, per-pipeline and per-service CPU/RSS (+ energy); call `sample()` each period,
    then `close()`."""

    def __init__(
        self,
        writer: ChunkWriter,
        pipeline_pids: dict[str, int],
        *,
        cpu_watts_per_core: float | None = None,
        harness_pid: int | None = None,
        service_pids: dict[str, int] | None = None,
        powercap_root: Path = POWERCAP_ROOT,
        children_refresh_s: float = 1.0,
        flush_period_s: float = 1.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._writer = writer
        self._clock_ns = clock_ns
        self._flush_period_ns = int(flush_period_s * 1e9)
        self._children_refresh_ns = int(children_refresh_s * 1e9)
        self._rows: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        self._rapl = RaplReader(powercap_root)
        self._watts_per_core = cpu_watts_per_core
        self.energy_source = (
            "rapl" if self._rapl.available else "model_estimate" if cpu_watts_per_core else None
        )
        self.energy_j: float | None = None
        self._rapl_base_j: float | None = None
        self._host = HostReader()
        self._last_host_cpu: tuple[float, float] | None = None  # (busy_s, total_s)
        self._first_busy_s: float | None = None
        self._last_ts_ns: int | None = None
        self._last_flush_ns = clock_ns()
        self.samples = 0
        self.rows = 0
        self.dropped: list[str] = []
        services = service_pids or {}
        # The harness tree stops at workers and servers (they have rows of their own).
        self._worker_pids = set(pipeline_pids.values()) | set(services.values())
        self._next_refresh_ns = 0
        self._pipelines: list[_Tree] = []
        for scope, trees in (("process", pipeline_pids), ("service", services)):
            for name, pid in trees.items():
                try:
                    reader = ProcessReader(psutil.Process(pid))
                except psutil.Error:
                    log.warning("%s %s (pid %d) is not running; not sampled", scope, name, pid)
                    self.dropped.append(name)
                    continue
                self._pipelines.append(_Tree(name, scope, reader))
        self._harness: _Tree | None = None
        if harness_pid is not None:
            try:
                self._harness = _Tree(None, "harness", ProcessReader(psutil.Process(harness_pid)))
            except psutil.Error:
                log.warning("harness (pid %d) is not running; its CPU is not sampled", harness_pid)

    # -- host ------------------------------------------------------------------------------------

    def _host_cpu(self) -> float | None:
        """Busy percent of all cores since the previous reading (None on the first, or when
        /proc/stat has not ticked since: the baseline is kept, so no busy time is lost)."""
        busy_s, total_s = self._host.cpu_s()
        previous = self._last_host_cpu
        if previous is not None and total_s <= previous[1]:
            return None
        self._last_host_cpu = (busy_s, total_s)
        if self._first_busy_s is None:
            self._first_busy_s = busy_s
        if previous is None:
            return None
        busy_delta_s = busy_s - previous[0]
        return min(max(busy_delta_s / (total_s - previous[1]) * 100.0, 0.0), 100.0)

    def _host_energy(self) -> float | None:
        if self.energy_source == "rapl":
            total_j = self._rapl.read_j()
            if self._rapl_base_j is None:
                self._rapl_base_j = total_j  # cumulative since the first sample
            self.energy_j = total_j - self._rapl_base_j
        elif self.energy_source == "model_estimate":
            # The integral of cores busy x watts per core is watts x busy core-seconds.
            assert self._watts_per_core is not None and self._last_host_cpu is not None
            assert self._first_busy_s is not None
            busy_s = self._last_host_cpu[0] - self._first_busy_s
            self.energy_j = self._watts_per_core * max(busy_s, 0.0)
        return self.energy_j

    # -- processes -------------------------------------------------------------------------------

    def _refresh_trees(self, ts_ns: int) -> None:
        """Re-discover every tree's members from one scan of the process table."""
        self._next_refresh_ns = ts_ns + self._children_refresh_ns
        children_of: dict[int, list[int]] = {}
        for pid, ppid in ppid_map().items():
            children_of.setdefault(ppid, []).append(pid)
        for tree in self._pipelines:
            tree.set_members(descendants(children_of, tree.root.pid, set()))
        if self._harness is not None:
            harness = self._harness
            harness.set_members(descendants(children_of, harness.root.pid, self._worker_pids))

    def _sample_tree(self, tree: _Tree, ts_ns: int, dt_s: float | None) -> bool:
        """Append one row for the tree; False when its root process is gone."""
        rss = 0
        used_cpu_s = 0.0
        cpu_times: dict[int, float] = {}
        for pid, member in list(tree.members.items()):
            try:
                cpu_s, rss_bytes = member.read()
            except psutil.Error:
                if pid == tree.root.pid:
                    return False
                del tree.members[pid]
                member.close()
                continue
            cpu_times[pid] = cpu_s
            previous = tree.last_cpu_s.get(pid)
            if previous is not None:
                used_cpu_s += max(cpu_s - previous, 0.0)
            rss += rss_bytes
        first = not tree.last_cpu_s
        tree.last_cpu_s = cpu_times  # members that exited drop out here
        cpu_util = None if first or not dt_s else used_cpu_s / dt_s * 100.0
        self._append(ts_ns, tree.name, tree.scope, tree.root.pid, cpu_util, rss / MIB)
        return True

    # -- rows ------------------------------------------------------------------------------------

    def _append(
        self,
        ts_ns: int,
        pipeline: str | None,
        scope: str,
        pid: int | None,
        cpu_util: float | None,
        rss_mib: float | None,
        energy_j: float | None = None,
        energy_source: str | None = None,
    ) -> None:
        rows = self._rows
        rows["ts_ns"].append(ts_ns)
        rows["pipeline"].append(pipeline)
        rows["scope"].append(scope)
        rows["pid"].append(pid)
        rows["cpu_util"].append(cpu_util)
        rows["rss_mib"].append(rss_mib)
        rows["energy_j"].append(energy_j)
        rows["energy_source"].append(energy_source)
        self.rows += 1

    def sample(self) -> bool:
        """Take one sample of the host, every live pipeline and service, and the harness;
        always True."""
        ts_ns = self._clock_ns()
        dt_s = None if self._last_ts_ns is None else (ts_ns - self._last_ts_ns) / 1e9
        cpu_util = self._host_cpu()
        energy_j = self._host_energy()
        self._append(
            ts_ns,
            None,
            "host",
            None,
            cpu_util,
            self._host.memory_used_bytes() / MIB,
            energy_j,
            self.energy_source if energy_j is not None else None,
        )
        if ts_ns >= self._next_refresh_ns:
            self._refresh_trees(ts_ns)
        for pipeline in list(self._pipelines):
            if not self._sample_tree(pipeline, ts_ns, dt_s):
                log.info(
                    "%s %s (pid %d) exited; dropped",
                    pipeline.scope,
                    pipeline.name,
                    pipeline.root.pid,
                )
                pipeline.close()
                self._pipelines.remove(pipeline)
                assert pipeline.name is not None
                self.dropped.append(pipeline.name)
        if self._harness is not None and not self._sample_tree(self._harness, ts_ns, dt_s):
            log.info(
                "harness (pid %d) exited; its CPU is no longer sampled", self._harness.root.pid
            )
            self._harness.close()
            self._harness = None
        self._last_ts_ns = ts_ns
        self.samples += 1
        if (
            ts_ns - self._last_flush_ns >= self._flush_period_ns
            or len(self._rows["ts_ns"]) >= FLUSH_ROWS
        ):
            self.flush()
        return True

    def flush(self) -> None:
        """Write buffered rows as a chunk file (no-op when empty)."""
        self._last_flush_ns = self._clock_ns()
        if self._rows["ts_ns"]:
            self._writer.write_columns(self._rows)
            self._rows = {name: [] for name in _COLUMNS}

    def close(self) -> HostSamplerResult:
        """Flush, release RAPL files and summarise."""
        self.flush()
        self._rapl.close()
        self._host.close()
        for tree in [*self._pipelines, *([self._harness] if self._harness else [])]:
            tree.close()
        return HostSamplerResult(
            samples=self.samples,
            rows=self.rows,
            energy_j=self.energy_j,
            energy_source=self.energy_source if self.energy_j is not None else None,
            dropped_pipelines=list(self.dropped),
        )

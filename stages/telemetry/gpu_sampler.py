"""Samples one GPU into `gpu_samples` and `gpu_process_samples` rows.

Energy prefers the driver's total-energy counter (`nvml_counter`), repairing counter resets,
and falls back to trapezoidal integration of power (`nvml_power`), also when the counter stops
being supported mid-run (the same cumulative series goes on). `energy_j` is cumulative since
the sampler's first sample; from the counter, a row carries it only where the counter was read
and had moved (a stale value at a fresh timestamp would skew interpolation at window edges).
A lost GPU ends sampling of that device without raising: rows already taken are flushed and
the error is returned in `GpuSamplerResult`, with which power reading was used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from stages.rundir.tables import ChunkWriter
from stages.telemetry.gpu_backend import (
    GpuBackend,
    GpuError,
    GpuLostError,
    GpuNotSupportedError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

FLUSH_ROWS = 65_536  # as the recorder: flush at least once a second or every 64k rows

_GPU_COLUMNS = (
    "ts_ns",
    "gpu",
    "uuid",
    "power_w",
    "energy_j",
    "energy_source",
    "sm_util",
    "mem_util",
    "mem_used_mib",
    "sm_clock_mhz",
    "temp_c",
    "throttle_reasons",
)
_PROCESS_COLUMNS = ("ts_ns", "gpu", "pid", "pipeline", "sm_util", "mem_util", "mem_used_mib")


@dataclass
class GpuSamplerResult:
    """What one GPU sampler did: row counts, final energy and the error that stopped it."""

    gpu: int
    uuid: str | None
    samples: int
    process_rows: int
    energy_j: float | None
    energy_source: str | None  # nvml_counter | nvml_power | None
    counter_resets: int
    power_field: str | None  # instant | average: which NVML power reading power_w holds
    error: str | None  # e.g. the GPU was lost mid-run; None on a clean stop


class _Energy:
    """Cumulative energy of one device from the counter, else from power; resets repaired."""

    def __init__(self) -> None:
        self.source: str | None = None
        self.energy_j: float | None = None
        self.counter_resets = 0
        self._last_counter_mj: int | None = None
        self._last_power: tuple[int, float] | None = None  # (ts_ns, power_w)
        self._power_since_counter_j = 0.0  # power-integrated energy since the counter moved
        self._decided = False

    def update(
        self, ts_ns: int, counter_mj: int | None, power_w: float | None, counter_read: bool = True
    ) -> float | None:
        """Fold in one sample; returns cumulative joules for this row, None when the row has
        no fresh figure (from the counter: not polled this time, unchanged, or a failed read)."""
        power_estimate_j = self._power_increment_j(ts_ns, power_w)
        self._power_since_counter_j += power_estimate_j or 0.0
        if not self._decided:
            self._decided = True
            if counter_mj is not None:
                self.source, self._last_counter_mj = "nvml_counter", counter_mj
                self._power_since_counter_j = 0.0
            elif power_w is not None:
                self.source = "nvml_power"
            self.energy_j = 0.0 if self.source else None
            return self.energy_j
        if self.source == "nvml_counter":
            if not counter_read or counter_mj is None:
                return None  # not polled, or a failed read: the next delta covers it
            assert self._last_counter_mj is not None and self.energy_j is not None
            delta_mj = counter_mj - self._last_counter_mj
            if delta_mj == 0:
                return None  # it has not moved since the last read: a stale value
            if delta_mj > 0:
                self.energy_j += delta_mj / 1000.0
            else:
                # The counter restarted (driver reload, reset) and holds the energy since then;
                # the part before the reset is unknown, so the interval since it last moved
                # takes the larger of that and the power integral over it. Never negative.
                self.counter_resets += 1
                self.energy_j += max(counter_mj / 1000.0, self._power_since_counter_j)
                log.info("GPU energy counter reset repaired (%d -> %d mJ)", delta_mj, counter_mj)
            self._last_counter_mj = counter_mj
            self._power_since_counter_j = 0.0
            return self.energy_j
        if self.source == "nvml_power":
            if power_estimate_j is None:
                return None
            assert self.energy_j is not None
            self.energy_j += power_estimate_j
            return self.energy_j
        return None

    def switch_to_power(self) -> None:
        """The counter stopped being readable: continue the same series from power, first
        adding the power integral since the counter last moved (so the series has no gap)."""
        if self.source == "nvml_counter":
            self.source = "nvml_power"
            if self.energy_j is not None:
                self.energy_j += self._power_since_counter_j
            self._power_since_counter_j = 0.0
            log.warning("GPU energy counter became unsupported; integrating power from now on")

    def _power_increment_j(self, ts_ns: int, power_w: float | None) -> float | None:
        previous = self._last_power
        if power_w is None:
            return None
        self._last_power = (ts_ns, power_w)
        if previous is None:
            return None
        previous_ns, previous_w = previous
        return (previous_w + power_w) / 2.0 * max(ts_ns - previous_ns, 0) / 1e9


class GpuSampler:
    """Reads one device through a `GpuBackend`; call `sample()` each period, then `close()`."""

    def __init__(
        self,
        backend: GpuBackend,
        gpu_index: int,
        samples_writer: ChunkWriter,
        process_writer: ChunkWriter | None = None,
        *,
        pid_to_pipeline: Callable[[int], str | None] | None = None,
        process_period_ms: float = 100.0,
        counter_period_ms: float = 50.0,
        flush_period_s: float = 1.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.backend = backend
        self.gpu_index = gpu_index
        self._samples_writer = samples_writer
        self._process_writer = process_writer
        self._pid_to_pipeline = pid_to_pipeline or (lambda pid: None)
        # Per-process figures come from NVML's own ~1/6 s buffer: polling faster adds nothing.
        self._process_period_ns = int(process_period_ms * 1e6)
        # NVML's energy counter moves about every 100 ms: poll it at half that (as zeus does),
        # however short the sampling period; in between it could only repeat itself.
        self._counter_period_ns = int(counter_period_ms * 1e6)
        self._next_counter_ns = 0
        self._flush_period_ns = int(flush_period_s * 1e9)
        self._clock_ns = clock_ns
        self._energy = _Energy()
        self._unsupported: set[str] = set()
        self._warned: set[str] = set()
        self._rows: dict[str, list[Any]] = {name: [] for name in _GPU_COLUMNS}
        self._process_rows: dict[str, list[Any]] = {name: [] for name in _PROCESS_COLUMNS}
        self._last_flush_ns = clock_ns()
        self._next_process_ns = 0
        self._last_seen_us = 0
        self.samples = 0
        self.process_samples = 0
        self.error: str | None = None
        self.lost = False
        self.uuid: str | None = None
        try:
            self.uuid = backend.uuid(gpu_index)
        except GpuLostError as error:
            self._lose(error)
        except GpuError as error:
            log.warning("GPU %d: no UUID: %s", gpu_index, error)

    def _lose(self, error: GpuError) -> None:
        self.lost = True
        self.error = f"GPU {self.gpu_index} lost after {self.samples} samples: {error}"
        log.error("%s; sampling of this device stopped", self.error)

    def _read(self, metric: str, read: Callable[[int], T]) -> T | None:
        """One metric, or None when the device lacks it or the read failed; lost propagates."""
        if metric in self._unsupported:
            return None
        try:
            return read(self.gpu_index)
        except GpuLostError:
            raise
        except GpuNotSupportedError:
            self._unsupported.add(metric)  # never ask again: saves a driver call per sample
            log.info("GPU %d does not support %s", self.gpu_index, metric)
        except GpuError as error:
            if metric not in self._warned:
                self._warned.add(metric)
                log.warning("GPU %d: reading %s failed: %s", self.gpu_index, metric, error)
        return None

    def sample(self) -> bool:
        """Take one sample; returns False once the device is lost (stop calling then)."""
        if self.lost:
            return False
        ts_ns = self._clock_ns()
        try:
            self._sample_device(ts_ns)
            if self._process_writer is not None and ts_ns >= self._next_process_ns:
                self._next_process_ns = ts_ns + self._process_period_ns
                self._sample_processes(ts_ns)
        except GpuLostError as error:
            self._lose(error)
            self.flush()
            return False
        if (
            ts_ns - self._last_flush_ns >= self._flush_period_ns
            or len(self._rows["ts_ns"]) >= FLUSH_ROWS
        ):
            self.flush()
        return True

    def _sample_device(self, ts_ns: int) -> None:
        b = self.backend
        # Read everything before appending, so a device lost mid-sample leaves no partial row.
        power_w = self._read("power", b.power_w)
        counter_mj = None
        period_ns, due_ns = self._counter_period_ns, self._next_counter_ns
        counter_read = self._energy.source is None or (
            # a tenth of slack: a tick that wakes a hair early must not skip its read
            self._energy.source == "nvml_counter" and ts_ns >= due_ns - period_ns // 10
        )
        if counter_read:
            behind = ts_ns - due_ns > period_ns
            self._next_counter_ns = ts_ns + period_ns if behind else due_ns + period_ns
            counter_mj = self._read("energy_counter", b.total_energy_mj)
            if counter_mj is None and "energy_counter" in self._unsupported:
                self._energy.switch_to_power()
        sm_util, mem_util = self._read("utilization", b.utilization) or (None, None)
        values = {
            "ts_ns": ts_ns,
            "gpu": self.gpu_index,
            "uuid": self.uuid,
            "power_w": power_w,
            "sm_util": sm_util,
            "mem_util": mem_util,
            "mem_used_mib": self._read("memory", b.memory_used_mib),
            "sm_clock_mhz": self._read("sm_clock", b.sm_clock_mhz),
            "temp_c": self._read("temperature", b.temperature_c),
            "throttle_reasons": self._read("throttle_reasons", b.throttle_reasons),
        }
        energy_j = self._energy.update(ts_ns, counter_mj, power_w, counter_read)
        values["energy_j"] = energy_j
        values["energy_source"] = self._energy.source if energy_j is not None else None
        for name, value in values.items():
            self._rows[name].append(value)
        self.samples += 1

    def _sample_processes(self, ts_ns: int) -> None:
        memory = {
            process.pid: process.used_memory_mib
            for process in self._read("compute_processes", self.backend.compute_processes) or []
        }
        utilization: dict[int, tuple[float, float]] = {}
        samples = self._read(
            "process_utilization",
            lambda index: self.backend.process_utilization(index, self._last_seen_us),
        )
        for sample in sorted(samples or [], key=lambda s: s.timestamp_us):
            utilization[sample.pid] = (sample.sm_util_pct, sample.mem_util_pct)
            self._last_seen_us = max(self._last_seen_us, sample.timestamp_us)
        rows = self._process_rows
        for pid in sorted(memory.keys() | utilization.keys()):
            sm_util, mem_util = utilization.get(pid, (None, None))
            rows["ts_ns"].append(ts_ns)
            rows["gpu"].append(self.gpu_index)
            rows["pid"].append(pid)
            rows["pipeline"].append(self._pid_to_pipeline(pid))
            rows["sm_util"].append(sm_util)
            rows["mem_util"].append(mem_util)
            rows["mem_used_mib"].append(memory.get(pid))
            self.process_samples += 1

    def flush(self) -> None:
        """Write buffered rows as chunk files (no-op when empty)."""
        self._last_flush_ns = self._clock_ns()
        if self._rows["ts_ns"]:
            self._samples_writer.write_columns(self._rows)
            self._rows = {name: [] for name in _GPU_COLUMNS}
        if self._process_writer is not None and self._process_rows["ts_ns"]:
            self._process_writer.write_columns(self._process_rows)
            self._process_rows = {name: [] for name in _PROCESS_COLUMNS}

    def close(self) -> GpuSamplerResult:
        """Flush and summarise; the backend stays open (the caller owns it)."""
        self.flush()
        return GpuSamplerResult(
            gpu=self.gpu_index,
            uuid=self.uuid,
            samples=self.samples,
            process_rows=self.process_samples,
            energy_j=self._energy.energy_j,
            energy_source=self._energy.source,
            counter_resets=self._energy.counter_resets,
            power_field=self.backend.power_field(self.gpu_index),
            error=self.error,
        )

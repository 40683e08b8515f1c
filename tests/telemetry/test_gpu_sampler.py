"""GPU sampler against the fake NVML: energy sources and repairs, a lost GPU, process rows."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest

from stages.rundir.tables import ChunkWriter, part_files, read_table
from stages.telemetry.fake_nvml import FakeNvml
from stages.telemetry.gpu_backend_factory import FAKE_NVML_ENV_VAR
from stages.telemetry.gpu_sampler import GpuSampler, GpuSamplerResult
from stages.telemetry.nvml_backend import NvmlBackend
from stages.telemetry.sampler_process import (
    SamplerSettings,
    foreign_compute_processes,
    gpu_sampler_main,
    run_periodic,
)

KEYS = {"run_id": "r1", "trial": 0, "phase": "collocated"}


class Clock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


class SteppingEvent:
    """A stop event for a fake clock: wait(timeout) advances time instead of sleeping."""

    def __init__(self, clock: Clock, stop_at_s: float) -> None:
        self.clock = clock
        self.stop_at_ns = round(stop_at_s * 1e9)
        self.timeouts_s: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.timeouts_s.append(timeout)
        self.clock.now_ns = min(self.clock.now_ns + round(timeout * 1e9), self.stop_at_ns)
        return self.is_set()

    def is_set(self) -> bool:
        return self.clock.now_ns >= self.stop_at_ns


def run_sampler(
    tmp_path: Path,
    device: dict[str, Any],
    *,
    period_ms: float = 50.0,
    stop_at_s: float = 3.0,
    **sampler_options: Any,
) -> tuple[GpuSamplerResult, FakeNvml, SteppingEvent]:
    clock = Clock()
    fake = FakeNvml({"start_ns": 0, "devices": [device]}, clock_ns=clock)
    backend = NvmlBackend(fake)
    sampler = GpuSampler(
        backend,
        0,
        ChunkWriter(tmp_path, "gpu_samples", "gpu0", KEYS),
        ChunkWriter(tmp_path, "gpu_process_samples", "gpu0", KEYS),
        clock_ns=clock,
        **sampler_options,
    )
    event = SteppingEvent(clock, stop_at_s)
    run_periodic(sampler.sample, event, period_ms, clock_ns=clock)
    return sampler.close(), fake, event


def gpu_rows(tmp_path: Path) -> dict[str, list[Any]]:
    return read_table(tmp_path, "gpu_samples").sort_by("ts_ns").to_pydict()


def expected_energy_j(fake: FakeNvml, ts_ns: list[int]) -> list[float]:
    return [fake.scripted_energy_j(0, ts_ns[0] / 1e9, ts / 1e9) for ts in ts_ns]


def test_counter_reset_keeps_energy_monotonic_and_right(tmp_path: Path) -> None:
    device = {"power_w": [[0, 150.0], [1.0, 250.0]], "energy_resets_at_s": [1.72]}
    result, fake, event = run_sampler(tmp_path, device)
    rows = gpu_rows(tmp_path)
    assert result.error is None
    assert result.counter_resets == 1
    assert set(rows["energy_source"]) == {"nvml_counter", None}  # None: counter had not moved
    energy = [e for e in rows["energy_j"] if e is not None]
    assert energy[0] == 0.0
    assert all(b > a for a, b in itertools.pairwise(energy))
    # Every row equals the scripted integral within the counter's 100 ms granularity.
    expected = expected_energy_j(fake, rows["ts_ns"])
    for got, want in zip(rows["energy_j"], expected, strict=True):
        assert got is None or got == pytest.approx(want, abs=0.1 * 250 + 1)
    total = fake.scripted_energy_j(0, 0.0, 3.0)  # 150 J + 2 s x 250 W = 650 J
    assert total == pytest.approx(650.0)
    assert result.energy_j == pytest.approx(total, rel=0.02)
    assert rows["ts_ns"][-1] == 3_000_000_000  # one last sample when stopped
    assert len(part_files(tmp_path, "gpu_samples")) >= 3  # flushed at least once a second
    assert all(t > 0 for t in event.timeouts_s)  # waited every time, never spun


def test_power_integration_when_counter_unsupported(tmp_path: Path) -> None:
    device = {
        "power_w": [[0, 100.0], [1.0, 200.0], [2.0, 50.0]],
        "not_supported": ["nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTemperature"],
    }
    result, fake, _ = run_sampler(tmp_path, device)
    rows = gpu_rows(tmp_path)
    assert set(rows["energy_source"]) == {"nvml_power"}
    assert result.energy_source == "nvml_power"
    # Trapezoids over steps err by at most half a period x the step, per step.
    for got, want in zip(rows["energy_j"], expected_energy_j(fake, rows["ts_ns"]), strict=True):
        assert got == pytest.approx(want, abs=0.5 * 0.05 * 150 * 2 + 1e-6)
    assert result.energy_j == pytest.approx(350.0, abs=5.0)
    assert set(rows["temp_c"]) == {None}  # unsupported metric: NULL, not a failure
    assert rows["power_w"][0] == pytest.approx(100.0)
    assert set(rows["sm_clock_mhz"]) == {1410.0}


def test_counter_polled_at_half_its_update_period(tmp_path: Path) -> None:
    calls = {"counter": 0}
    original = NvmlBackend.total_energy_mj

    def counting(self: NvmlBackend, index: int) -> int | None:
        calls["counter"] += 1
        return original(self, index)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NvmlBackend, "total_energy_mj", counting)
        result, _, _ = run_sampler(tmp_path, {"power_w": 200.0}, period_ms=10, stop_at_s=1.0)
    assert result.samples == 101
    assert 19 <= calls["counter"] <= 23  # every 50 ms, not every 10 ms sample
    assert result.energy_j == pytest.approx(200.0, abs=200 * 0.1 + 1)


def test_lost_gpu_keeps_rows_and_reports(tmp_path: Path) -> None:
    result, _, event = run_sampler(tmp_path, {"power_w": 120.0, "lost_at_s": 1.0})
    assert result.error is not None and "lost" in result.error
    rows = gpu_rows(tmp_path)  # rows before the loss were flushed and are readable
    assert len(rows["ts_ns"]) == result.samples == 20
    assert max(rows["ts_ns"]) < 1_000_000_000
    energy = [e for e in rows["energy_j"] if e is not None]
    assert energy[-1] == pytest.approx(0.95 * 120, abs=120 * 0.1)
    assert event.clock.now_ns < 3_000_000_000  # stopped sampling at the loss


def test_per_process_rows(tmp_path: Path) -> None:
    device = {
        "processes": [
            {"pid": 4242, "used_memory_mib": 300, "sm_util_pct": [[0, 30], [0.5, 70]]},
            {"pid": 5151, "used_memory_mib": 100, "start_s": 0.3},
        ]
    }
    result, _, _ = run_sampler(
        tmp_path,
        device,
        stop_at_s=1.0,
        pid_to_pipeline={4242: "classify"}.get,
        process_period_ms=100,
    )
    table = read_table(tmp_path, "gpu_process_samples").sort_by("ts_ns")
    assert table.num_rows == result.process_rows > 0
    rows = table.to_pylist()
    busy = [r for r in rows if r["pid"] == 4242]
    idle = [r for r in rows if r["pid"] == 5151]
    assert {r["pipeline"] for r in busy} == {"classify"}
    assert {r["pipeline"] for r in idle} == {None}  # not one of ours
    assert {r["mem_used_mib"] for r in busy} == {300.0}
    assert [r["sm_util"] for r in busy if r["ts_ns"] < 500_000_000] == [30.0] * 5
    assert {r["sm_util"] for r in busy if r["ts_ns"] >= 500_000_000} == {70.0}
    assert idle and min(r["ts_ns"] for r in idle) >= 300_000_000
    assert {r["sm_util"] for r in idle} == {None}  # no utilisation sample: NULL, not 0
    assert {r["run_id"] for r in rows} == {"r1"}


@pytest.mark.spawns
def test_foreign_compute_processes(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        script = {
            "devices": [
                {
                    "processes": [
                        {"pid": os.getpid(), "used_memory_mib": 500},
                        {"pid": child.pid, "used_memory_mib": 10},  # a child of ours
                        {"pid": 1, "used_memory_mib": 2000},
                        {"pid": 3_999_999, "used_memory_mib": 700},  # not visible here
                    ]
                },
                {"lost_at_s": 0.0},
            ]
        }
        backend = NvmlBackend(FakeNvml(script))
        foreign = foreign_compute_processes(backend, [0, 1], [os.getpid()])
    finally:
        child.kill()
        child.wait()
    assert [(p["gpu"], p["pid"], p["used_memory_mib"]) for p in foreign] == [
        (0, 1, 2000.0),
        (0, 3_999_999, 700.0),
    ]
    assert foreign[0]["name"]  # a visible process is named
    assert foreign[1]["name"] is None


@pytest.mark.spawns
def test_spawned_gpu_sampler_main_with_fake_via_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = {
        "start_ns": time.monotonic_ns(),  # one clock for this process and the sampler
        "devices": [
            {"uuid": "GPU-fake-0", "power_w": 80.0, "processes": [{"pid": 7, "sm_util_pct": 5}]},
            {"uuid": "GPU-fake-1", "power_w": 300.0},
        ],
    }
    script_path = tmp_path / "fake_nvml.json"
    script_path.write_text(json.dumps(script))
    monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(script_path))
    run_dir = tmp_path / "run"
    settings = SamplerSettings(str(run_dir), "r9", 1, "solo", 50.0, {"p": os.getpid()})
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=gpu_sampler_main, args=(settings, 1, stop))
    process.start()
    deadline = time.monotonic() + 20
    parts = run_dir / "parts" / "gpu_samples"
    while time.monotonic() < deadline and not any(parts.glob("*.parquet")):
        time.sleep(0.05)  # the first chunk lands one second into sampling
    stop.set()
    process.join(10)
    assert process.exitcode == 0
    table = read_table(run_dir, "gpu_samples").sort_by("ts_ns")
    assert table.num_rows >= 15
    rows = table.to_pydict()
    assert set(rows["uuid"]) == {"GPU-fake-1"}
    assert set(rows["gpu"]) == {1}
    assert set(rows["phase"]) == {"solo"} and set(rows["trial"]) == {1}
    assert set(rows["pipeline"]) == {None}
    assert set(rows["energy_source"]) - {None} == {"nvml_counter"}
    energy = [(t, e) for t, e in zip(rows["ts_ns"], rows["energy_j"], strict=True) if e is not None]
    span_s = (energy[-1][0] - rows["ts_ns"][0]) / 1e9
    assert energy[-1][1] == pytest.approx(300.0 * span_s, abs=300 * 0.1 + 1)
    assert table.schema.field("energy_j").type == pa.float64()


def test_counter_turning_unsupported_mid_run_continues_from_power(tmp_path: Path) -> None:
    # The real backend over the fake pynvml: the counter answers NotSupported from 1.5 s on.
    device = {
        "power_w": [[0, 100.0], [2.0, 300.0]],
        "not_supported_from_s": {"nvmlDeviceGetTotalEnergyConsumption": 1.5},
    }
    result, fake, _ = run_sampler(tmp_path, device, period_ms=10)
    rows = gpu_rows(tmp_path)
    late = [
        (ts, energy, source)
        for ts, energy, source in zip(
            rows["ts_ns"], rows["energy_j"], rows["energy_source"], strict=True
        )
        if ts >= 1_500_000_000
    ]
    assert len(late) == 151
    # Every row after the switch carries energy, integrated from power, in one series.
    assert all(energy is not None for _, energy, _ in late)
    assert {source for _, _, source in late} == {"nvml_power"}
    assert result.energy_source == "nvml_power"
    energy = [e for e in rows["energy_j"] if e is not None]
    assert all(b >= a for a, b in itertools.pairwise(energy))
    # No jump at the switch: each row still equals the true integral (counter lag <= 100 ms).
    for ts, got, _ in late:
        assert got == pytest.approx(fake.scripted_energy_j(0, 0.0, ts / 1e9), abs=100 * 0.1 + 1)
    total = fake.scripted_energy_j(0, 0.0, 3.0)  # 2 s x 100 W + 1 s x 300 W = 500 J
    assert result.energy_j == pytest.approx(total, abs=3.0)


def interpolated_j(ts_ns: list[int], energy_j: list[float | None], t_ns: int) -> float:
    """E(t) as the energy view computes it: linear between the rows that carry energy and
    bracket t (the last at or before, the first at or after)."""
    points = [(t, e) for t, e in zip(ts_ns, energy_j, strict=True) if e is not None]
    before = max((p for p in points if p[0] <= t_ns), key=lambda p: p[0])
    after = min((p for p in points if p[0] >= t_ns), key=lambda p: p[0])
    if after[0] == before[0]:
        return before[1]
    return before[1] + (after[1] - before[1]) * (t_ns - before[0]) / (after[0] - before[0])


def test_counter_rows_only_where_the_counter_moved(tmp_path: Path) -> None:
    # The counter moves every 100 ms (3 ms before each 100 ms tick of the sampler's clock);
    # the sampler samples every 10 ms and polls the counter every 50 ms.
    clock = Clock()
    script = {"start_ns": -3_000_000, "devices": [{"power_w": 200.0}]}
    fake = FakeNvml(script, clock_ns=clock)
    sampler = GpuSampler(
        NvmlBackend(fake), 0, ChunkWriter(tmp_path, "gpu_samples", "gpu0", KEYS), clock_ns=clock
    )
    run_periodic(sampler.sample, SteppingEvent(clock, 3.0), 10.0, clock_ns=clock)
    result = sampler.close()
    rows = gpu_rows(tmp_path)
    assert len(rows["ts_ns"]) == result.samples == 301
    assert None not in rows["power_w"]  # power and the rest stay on every row
    energy_ts = [t for t, e in zip(rows["ts_ns"], rows["energy_j"], strict=True) if e is not None]
    # The first row (the series' origin) and one row per counter update: 30 in 3 s.
    assert len(energy_ts) == 31
    assert {b - a for a, b in itertools.pairwise(energy_ts[1:])} == {100_000_000}
    sources = {s for s, e in zip(rows["energy_source"], rows["energy_j"], strict=True) if e}
    assert sources == {"nvml_counter"}
    # Short windows anywhere in the run see the true 200 W (a stale value repeated at fresh
    # timestamps made windows between two repeats read 0 W and the next one several times more).
    window_ns = 30_000_000
    powers_w = [
        (
            interpolated_j(rows["ts_ns"], rows["energy_j"], start_ns + window_ns)
            - interpolated_j(rows["ts_ns"], rows["energy_j"], start_ns)
        )
        / (window_ns / 1e9)
        for start_ns in range(200_000_000, 2_900_000_000, 7_000_000)
    ]
    assert min(powers_w) == pytest.approx(200.0, rel=0.01)
    assert max(powers_w) == pytest.approx(200.0, rel=0.01)


@pytest.mark.parametrize(
    ("fallback", "power_field", "power_at_1_25_s_w"),
    [
        ({}, "instant", 300.0),
        # The field answers NOT_SUPPORTED in its own return code (the call itself succeeds).
        ({"unsupported_fields": [186]}, "average", 150.0),
        # An old driver without nvmlDeviceGetFieldValues at all.
        ({"not_supported": ["nvmlDeviceGetFieldValues"]}, "average", 150.0),
    ],
)
def test_instant_power_field_preferred_over_the_average(
    tmp_path: Path, fallback: dict[str, Any], power_field: str, power_at_1_25_s_w: float
) -> None:
    # nvmlDeviceGetPowerUsage is a 1 s moving average here, as on Ampere and newer: right
    # after a step from 100 W to 300 W it reads the mean of the last second.
    device = {"power_w": [[0, 100.0], [1.0, 300.0]], "power_average_s": 1.0, **fallback}
    result, _, _ = run_sampler(tmp_path, device, stop_at_s=2.0)
    rows = gpu_rows(tmp_path)
    power_w = dict(zip(rows["ts_ns"], rows["power_w"], strict=True))
    assert result.power_field == power_field
    assert power_w[1_250_000_000] == pytest.approx(power_at_1_25_s_w)
    assert power_w[2_000_000_000] == pytest.approx(300.0)


@pytest.mark.spawns
def test_a_services_descendant_on_the_gpu_is_named_after_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server whose GPU work runs in a child (as vLLM's engine core does): the fake NVML lists
    # the child's pid, and the spawned sampler, given the server's pid, names the rows after
    # the service; a pid of no service nor pipeline stays NULL.
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'import time; time.sleep(60)'])",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(server.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        engine = psutil.Process(server.pid).children()[0].pid
        script = {
            "start_ns": time.monotonic_ns(),
            "devices": [
                {
                    "processes": [
                        {"pid": engine, "sm_util_pct": 40},
                        {"pid": 3_999_999, "sm_util_pct": 5},
                    ]
                }
            ],
        }
        script_path = tmp_path / "fake_nvml.json"
        script_path.write_text(json.dumps(script))
        monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(script_path))
        run_dir = tmp_path / "run"
        settings = SamplerSettings(
            str(run_dir),
            "r9",
            0,
            "collocated",
            50.0,
            {"p": os.getpid()},
            service_pids={"llm": server.pid},
        )
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        process = context.Process(target=gpu_sampler_main, args=(settings, 0, stop))
        process.start()
        parts = run_dir / "parts" / "gpu_process_samples"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(parts.glob("*.parquet")):
            time.sleep(0.05)
        stop.set()
        process.join(10)
    finally:
        for child in psutil.Process(server.pid).children(recursive=True):
            child.kill()
        server.kill()
        server.wait()
    assert process.exitcode == 0
    rows = read_table(run_dir, "gpu_process_samples").to_pylist()
    named = {(row["pid"], row["pipeline"]) for row in rows}
    assert named == {(engine, "llm"), (3_999_999, None)}

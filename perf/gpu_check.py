"""`make gpu-check`: what collobench's GPU paths do on a real NVIDIA GPU, checked and printed.

One line per check (`ok`, `FAIL` or `skip`, with its figures), then one JSON line with
everything (also written to the file `$GPU_CHECK_OUT` when that variable is set). Exit 1 when
a check failed; 0 otherwise, including on a machine without a GPU, where every check is
`skip` with the reason. Needs only what `stages` and `analysis` need (no Dagster, no MLflow:
runs pass --no-mlflow), with the repository on PYTHONPATH and its egg-info generated in place.

Checks:
- nvml.*: the real pynvml backend: devices, power (and which field), memory used under an
  allocation, the total-energy counter under ~2 s of matmuls against the integral of power
  sampled every 20 ms (within ENERGY_TOLERANCE), per-process utilisation seeing our pid.
- cuda.placement: a worker's environment for `device: cuda:N` makes torch see that one GPU.
- cuda.sync: `device_synchronizer("cuda")`: matmuls timed without it (only queued) and with it.
- sampler.end_to_end: a short cuda spec through the CLI; gpu_samples has nvml_counter rows.
- mps: with an MPS daemon, a tiny mps spec runs; without, the launcher refuses it (as designed).
- spec.<name>: shipped model specs with every pipeline (and every started service) on cuda:
  status, p99, queries/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from stages.telemetry.gpu_backend import (
    GpuBackend,
    GpuError,
    GpuNotSupportedError,
    GpuUnavailableError,
)

REPO_ROOT = Path(__file__).resolve().parent.parent

OK, FAIL, SKIP = "ok", "FAIL", "skip"
CHECK_NAMES = (
    "nvml.devices",
    "nvml.power",
    "nvml.memory",
    "nvml.energy_counter",
    "nvml.process_utilization",
    "cuda.placement",
    "cuda.sync",
    "sampler.end_to_end",
    "mps",
)
MODEL_SPECS = ("demo", "vision_collocated", "llm_generate", "served_llm")
# Energy counter vs the integral of power sampled every POWER_PERIOD_S over the same window.
# The counter moves about every 100 ms (so ±0.1 s of power at each end of a ~4 s window) and an
# averaged power field lags the load (the idle padding around the load lets its area catch up).
ENERGY_TOLERANCE = {"instant": 0.10, "average": 0.20}
POWER_PERIOD_S = 0.02
LOAD_S = 2.0
PAD_S = 1.2  # idle before and after the load, longer than the ~1 s averaging of 'average'
SPEC_DURATION_S = 5.0
RUN_TIMEOUT_S = 600


@dataclass
class Check:
    """One check's outcome: status ok | FAIL | skip, a human-readable detail, its figures."""

    name: str
    status: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}"


def _skip_all(names: list[str], reason: str) -> list[Check]:
    return [Check(name, SKIP, reason) for name in names]


# ----------------------------------------------------------------------------- NVML checks


def check_devices(backend: GpuBackend) -> Check:
    count = backend.device_count()
    devices = [{"index": i, "name": backend.name(i), "uuid": backend.uuid(i)} for i in range(count)]
    if not count:
        return Check("nvml.devices", FAIL, "NVML started but reports no device")
    names = ", ".join(f"{d['index']}: {d['name']} ({d['uuid']})" for d in devices)
    return Check("nvml.devices", OK, f"{count} device(s): {names}", {"devices": devices})


def check_power(backend: GpuBackend, index: int = 0) -> Check:
    power_w = backend.power_w(index)
    field_name = backend.power_field(index)
    figures = {"power_w": round(power_w, 1), "power_field": field_name}
    if not 0 < power_w < 2000:
        return Check("nvml.power", FAIL, f"implausible power {power_w:.1f} W", figures)
    return Check("nvml.power", OK, f"{power_w:.1f} W idle, field '{field_name}'", figures)


def check_memory(backend: GpuBackend, allocate_mib: Callable[[int], Any], index: int = 0) -> Check:
    """Memory used rises by an allocation of 1 GiB (held while it is read)."""
    before_mib = backend.memory_used_mib(index)
    held = allocate_mib(1024)
    time.sleep(0.2)
    after_mib = backend.memory_used_mib(index)
    del held
    delta_mib = after_mib - before_mib
    figures = {"used_before_mib": round(before_mib), "used_after_mib": round(after_mib)}
    status = OK if 0.9 * 1024 <= delta_mib <= 1.5 * 1024 else FAIL
    return Check(
        "nvml.memory",
        status,
        f"{before_mib:.0f} -> {after_mib:.0f} MiB with 1 GiB allocated",
        figures,
    )


@dataclass
class EnergyTrace:
    """Power samples and counter readings over one window (monotonic seconds)."""

    times_s: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    counter_mj: list[tuple[float, int]] = field(default_factory=list)
    utilization_pids: set[int] = field(default_factory=set)  # per-process utilisation samples
    compute_pids: set[int] = field(default_factory=set)  # processes with a compute context
    process_error: str | None = None  # per-process utilisation unsupported (or failed)


@contextmanager
def sampled(backend: GpuBackend, index: int, trace: EnergyTrace) -> Iterator[None]:
    """Sample power every POWER_PERIOD_S in a thread; the counter at both ends."""
    stop = threading.Event()
    since_us = int(time.time() * 1e6)

    def loop() -> None:
        while not stop.is_set():
            trace.times_s.append(time.monotonic())
            trace.power_w.append(backend.power_w(index))
            stop.wait(POWER_PERIOD_S)

    trace.counter_mj.append((time.monotonic(), backend.total_energy_mj(index)))
    thread = threading.Thread(target=loop, name="power", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        trace.times_s.append(time.monotonic())
        trace.power_w.append(backend.power_w(index))
        trace.counter_mj.append((time.monotonic(), backend.total_energy_mj(index)))
        try:
            samples = backend.process_utilization(index, since_us)
            trace.utilization_pids = {sample.pid for sample in samples}
        except GpuError as error:
            trace.process_error = f"{type(error).__name__}: {error}"
        with suppress(GpuError):
            trace.compute_pids = {process.pid for process in backend.compute_processes(index)}


def integral_j(times_s: list[float], power_w: list[float]) -> float:
    """Trapezoid integral of power over time."""
    return sum(
        (t1 - t0) * (p0 + p1) / 2
        for t0, t1, p0, p1 in zip(times_s, times_s[1:], power_w, power_w[1:], strict=False)
    )


def check_energy(
    backend: GpuBackend,
    load: Callable[[float], None],
    index: int = 0,
    pad_s: float = PAD_S,
    load_s: float = LOAD_S,
) -> tuple[Check, EnergyTrace]:
    """The counter moves under load and agrees with the power integral."""
    trace = EnergyTrace()
    try:
        with sampled(backend, index, trace):
            time.sleep(pad_s)
            load_started = time.monotonic()
            load(load_s)
            load_ended = time.monotonic()
            time.sleep(pad_s)
    except GpuNotSupportedError as error:
        return Check(
            "nvml.energy_counter", SKIP, f"no energy counter on this device: {error}"
        ), trace
    (t0, e0), (t1, e1) = trace.counter_mj[0], trace.counter_mj[-1]
    counter_j = (e1 - e0) / 1000
    power_j = integral_j(trace.times_s, trace.power_w)
    loaded = [
        p
        for t, p in zip(trace.times_s, trace.power_w, strict=True)
        if load_started <= t <= load_ended
    ]
    idle = [p for t, p in zip(trace.times_s, trace.power_w, strict=True) if t < load_started]
    field_name = backend.power_field(index) or "average"
    tolerance = ENERGY_TOLERANCE.get(field_name, ENERGY_TOLERANCE["average"])
    difference = (counter_j - power_j) / power_j if power_j else float("inf")
    figures = {
        "window_s": round(t1 - t0, 2),
        "counter_j": round(counter_j, 1),
        "power_integral_j": round(power_j, 1),
        "difference": round(difference, 4),
        "tolerance": tolerance,
        "power_field": field_name,
        "idle_w": round(statistics.median(idle), 1) if idle else None,
        "load_w": round(statistics.median(loaded), 1) if loaded else None,
        "power_samples": len(trace.power_w),
    }
    detail = (
        f"counter {counter_j:.1f} J vs power integral {power_j:.1f} J over "
        f"{t1 - t0:.1f} s ({difference:+.1%}, tolerance ±{tolerance:.0%}); "
        f"{figures['idle_w']} W idle, {figures['load_w']} W under load"
    )
    moved = (
        counter_j > 0
        and bool(loaded)
        and bool(idle)
        and statistics.median(loaded) > statistics.median(idle)
    )
    status = OK if moved and abs(difference) <= tolerance else FAIL
    if not moved:
        detail = "counter or power did not rise under load: " + detail
    return Check("nvml.energy_counter", status, detail, figures), trace


def check_process_utilization(trace: EnergyTrace, pid: int) -> Check:
    """Per-process utilisation (sampled during the energy check's load) names our pid."""
    figures = {
        "our_pid": pid,
        "utilization_pids": sorted(trace.utilization_pids),
        "compute_pids": sorted(trace.compute_pids),
    }
    in_compute = f"compute processes {sorted(trace.compute_pids)}"
    if trace.process_error is not None:
        return Check(
            "nvml.process_utilization",
            SKIP,
            f"unsupported here: {trace.process_error}; {in_compute}",
            figures,
        )
    if pid in trace.utilization_pids:
        return Check(
            "nvml.process_utilization", OK, f"our pid {pid} sampled; {in_compute}", figures
        )
    return Check(
        "nvml.process_utilization",
        FAIL,
        f"our pid {pid} not among the sampled {sorted(trace.utilization_pids)} ({in_compute}; "
        "a PID namespace hides it?): gpu_process_samples cannot be matched to pipelines",
        figures,
    )


# ----------------------------------------------------------------------------- CUDA checks


def check_sync(torch: Any, size: int = 4096, repeats: int = 20) -> Check:
    """Matmuls timed without the synchroniser (queued only) and with it (done)."""
    from stages.library.core.torch_common import device_synchronizer

    synchronize = device_synchronizer("cuda", torch)
    a = torch.randn(size, size, device="cuda")
    for _ in range(3):
        a @ a
    synchronize()
    started = time.perf_counter_ns()
    for _ in range(repeats):
        a @ a
    queued_ms = (time.perf_counter_ns() - started) / 1e6
    synchronize()
    started = time.perf_counter_ns()
    for _ in range(repeats):
        a @ a
    synchronize()
    synced_ms = (time.perf_counter_ns() - started) / 1e6
    tflops = repeats * 2 * size**3 / (synced_ms / 1e3) / 1e12
    figures = {
        "queued_ms": round(queued_ms, 3),
        "synced_ms": round(synced_ms, 3),
        "tflop_per_s": round(tflops, 1),
    }
    status = OK if synced_ms > 3 * queued_ms and tflops < 5000 else FAIL
    return Check(
        "cuda.sync",
        status,
        f"{repeats} matmuls {size}x{size}: {queued_ms:.2f} ms queued without sync, "
        f"{synced_ms:.2f} ms with it ({tflops:.0f} TFLOP/s)",
        figures,
    )


def check_placement(backend: GpuBackend) -> Check:
    """A worker's environment for `device: cuda:N` narrows torch to GPU N (checked in a child,
    as a worker would be: CUDA_VISIBLE_DEVICES only counts before CUDA initialises)."""
    from stages.collocation.placement import torch_device, worker_environment
    from stages.spec.models import PipelineSpec

    index = backend.device_count() - 1
    pipeline = PipelineSpec.model_validate(
        {"name": "p", "device": f"cuda:{index}", "stages": [{"id": "a", "type": "noop"}]}
    )
    environment = worker_environment(pipeline, "time_slice")
    device = torch_device(pipeline, "time_slice")
    probe = (
        "import json, torch; p = torch.cuda.get_device_properties(0); "
        "print(json.dumps([torch.cuda.device_count(), str(getattr(p, 'uuid', ''))]))"
    )
    child = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if child.returncode != 0:
        return Check("cuda.placement", FAIL, f"probe failed: {child.stderr.strip()[-300:]}")
    count, uuid = json.loads(child.stdout.strip().splitlines()[-1])
    expected = backend.uuid(index)
    figures = {"environment": environment, "device": device, "visible": count, "uuid": uuid}
    same = not uuid or expected.endswith(uuid) or uuid in expected
    status = OK if count == 1 and device == "cuda:0" and same else FAIL
    return Check(
        "cuda.placement",
        status,
        f"cuda:{index} -> {environment} -> torch sees {count} device(s) ({uuid or 'no uuid'}; "
        f"NVML {expected}), stages use {device}",
        figures,
    )


# ----------------------------------------------------------------------------- runs via the CLI


def run_cli(spec_path: Path, out_dir: Path, overrides: list[str]) -> tuple[int, str, Path | None]:
    """`collobench run` in a child process; returns exit code, output tail, run directory."""
    command = [
        sys.executable,
        "-m",
        "stages.cli",
        "run",
        str(spec_path),
        "--no-mlflow",
        "--out",
        str(out_dir),
        "--db",
        str(out_dir / "results.duckdb"),
    ]
    for override in overrides:
        command += ["--set", override]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        child = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {RUN_TIMEOUT_S} s", None
    output = (child.stdout + child.stderr).strip()
    run_dirs = sorted(p.parent for p in out_dir.glob("*/manifest.json"))
    return child.returncode, output[-600:], run_dirs[-1] if run_dirs else None


def write_spec(directory: Path, document: dict[str, Any]) -> Path:
    import yaml

    path = directory / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def tiny_spec(name: str, mode: str, duration_s: float = 3.0) -> dict[str, Any]:
    return {
        "name": name,
        "collocation": {"mode": mode, "solo_baselines": False},
        "telemetry": {"gpu": {"period_ms": 50}},
        "pipelines": [
            {
                "name": "gpu",
                "device": "cuda",
                "loadgen": {"type": "server", "rate": 200, "duration_s": duration_s},
                "stages": [{"id": "nothing", "type": "noop"}],
            }
        ],
    }


def check_sampler(work: Path) -> Check:
    import pyarrow.parquet as pq

    code, output, run_dir = run_cli(
        write_spec(work, tiny_spec("gpu-check-sampler", "time_slice")), work / "sampler", []
    )
    if code != 0 or run_dir is None:
        return Check("sampler.end_to_end", FAIL, f"run exited {code}: {output}")
    path = run_dir / "gpu_samples.parquet"
    if not path.exists():
        return Check("sampler.end_to_end", FAIL, f"no gpu_samples.parquet in {run_dir}")
    rows = pq.read_table(path).to_pylist()
    counter_rows = [r for r in rows if r["energy_source"] == "nvml_counter"]
    energies = [r["energy_j"] for r in counter_rows if r["energy_j"] is not None]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    figures = {
        "rows": len(rows),
        "nvml_counter_rows": len(counter_rows),
        "energy_j": round(max(energies) - min(energies), 1) if energies else None,
        "manifest_energy": manifest.get("energy"),
        "run_dir": str(run_dir),
    }
    status = OK if counter_rows and energies and max(energies) > min(energies) else FAIL
    return Check(
        "sampler.end_to_end",
        status,
        f"{len(rows)} gpu_samples rows, {len(counter_rows)} with energy_source nvml_counter, "
        f"{figures['energy_j']} J over the run; manifest energy {manifest.get('energy')}",
        figures,
    )


def check_mps(work: Path) -> Check:
    from stages.collocation_modes.mps import mps_pipe_directory

    control = mps_pipe_directory() / "control"
    code, output, _ = run_cli(
        write_spec(work, tiny_spec("gpu-check-mps", "mps", 2.0)), work / "mps", []
    )
    figures = {"daemon": control.exists(), "exit_code": code}
    if control.exists():
        status = OK if code == 0 else FAIL
        return Check(
            "mps",
            status,
            f"daemon at {control}; tiny mps spec exited {code}: "
            + ("ran" if code == 0 else output),
            figures,
        )
    refused = code == 2 and "MPS control daemon" in output
    detail = (
        "daemon not running, placement refuses as designed"
        if refused
        else f"daemon not running, but the mps spec exited {code}: {output}"
    )
    return Check("mps", OK if refused else FAIL, detail, figures)


def check_model_spec(name: str, work: Path, duration_s: float) -> Check:
    import yaml

    spec_path = REPO_ROOT / "specs" / f"{name}.yaml"
    check_name = f"spec.{name}"
    if not spec_path.exists():
        return Check(check_name, SKIP, f"specs/{name}.yaml does not exist yet")
    document = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    overrides = []
    for pipeline in document.get("pipelines", []):
        overrides.append(f"pipelines.{pipeline['name']}.device=cuda")
        loadgen = pipeline.get("loadgen") or {}
        if float(loadgen.get("duration_s", 10.0)) > duration_s:
            overrides.append(f"pipelines.{pipeline['name']}.loadgen.duration_s={duration_s}")
    for service in document.get("services", []):
        # A served model's server moves to the GPU too (an `external` one is the user's).
        if service.get("type") != "external":
            overrides.append(f"services.{service['name']}.device=cuda")
    if int(document.get("repeats", 1)) > 1:
        overrides.append("repeats=1")
    code, output, run_dir = run_cli(spec_path, work / name, overrides)
    if run_dir is None:
        return Check(check_name, FAIL, f"run exited {code}, no run directory: {output}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    results = []
    for result in manifest.get("results", []):
        summary = result.get("summary") or {}
        results.append(
            {
                "phase": result["phase"],
                "pipeline": result["pipeline"],
                "status": result["status"],
                "error": result.get("error"),
                "p99_ms": summary.get("latency_p99_ms"),
                "queries_per_s": summary.get("queries_per_s"),
            }
        )
    parts = [
        f"{r['pipeline']} {r['phase']} {r['status']} p99 {_ms(r['p99_ms'])} "
        f"{_rate(r['queries_per_s'])}" + (f" ({r['error']})" if r["error"] else "")
        for r in results
    ]
    fine = code == 0 and results and all(r["status"] == "ok" for r in results)
    return Check(
        check_name,
        OK if fine else FAIL,
        f"exit {code}; " + "; ".join(parts),
        {"exit_code": code, "pipelines": results, "run_dir": str(run_dir)},
    )


def _ms(value: Any) -> str:
    return f"{value:.2f} ms" if isinstance(value, int | float) else str(value)


def _rate(value: Any) -> str:
    return f"{value:.1f} q/s" if isinstance(value, int | float) else "- q/s"


# ----------------------------------------------------------------------------- main


def open_backend() -> tuple[GpuBackend | None, str]:
    """Real NVML (never the fake: this checks hardware); None and why when there is none."""
    from stages.telemetry.nvml_backend import NvmlBackend

    try:
        backend = NvmlBackend()
    except GpuUnavailableError as error:
        return None, f"no NVIDIA GPU here ({error})"
    try:
        count = backend.device_count()
    except GpuError as error:
        backend.shutdown()
        return None, f"no NVIDIA GPU here (cannot count devices: {error})"
    if not count:
        backend.shutdown()
        return None, "no NVIDIA GPU here (NVML reports no device)"
    return backend, ""


def run_checks(
    specs: list[str], spec_duration_s: float, work_dir: Path | None = None
) -> tuple[list[Check], dict[str, Any]]:
    """Every check in order; the CLI runs' folders go under `work_dir` (default: a new
    temporary folder, kept so their run directories can be inspected afterwards)."""
    names = list(CHECK_NAMES) + [f"spec.{name}" for name in specs]
    environment: dict[str, Any] = {"python": sys.version.split()[0]}
    os.environ.pop("COLLOBENCH_FAKE_NVML", None)  # the CLI runs below must see the real GPU
    backend, reason = open_backend()
    if backend is None:
        return _skip_all(names, reason), environment
    checks: list[Check] = []
    try:
        checks.append(check_devices(backend))
        checks.append(check_power(backend))
        torch: Any = None
        try:
            import torch
        except ImportError as error:
            reason = f"torch is not importable: {error}"
        if torch is not None and not torch.cuda.is_available():
            torch, reason = None, "torch sees no CUDA device"
        if torch is not None:
            environment.update({"torch": torch.__version__, "cuda": torch.version.cuda})
        environment["gpu"] = backend.name(0)

        def allocate_mib(mib: int) -> Any:
            assert torch is not None
            tensor = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
            tensor.fill_(1)
            torch.cuda.synchronize()
            return tensor

        def matmul_load(seconds: float) -> None:
            assert torch is not None
            a = torch.randn(4096, 4096, device="cuda")
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                for _ in range(10):
                    a @ a
                torch.cuda.synchronize()

        if torch is None:
            checks += _skip_all(
                [
                    "nvml.memory",
                    "nvml.energy_counter",
                    "nvml.process_utilization",
                    "cuda.placement",
                    "cuda.sync",
                ],
                reason,
            )
        else:
            torch.ones(1, device="cuda")  # the context exists before memory is compared
            torch.cuda.synchronize()
            checks.append(guarded("nvml.memory", lambda: check_memory(backend, allocate_mib)))
            torch.cuda.empty_cache()
            try:
                energy, trace = check_energy(backend, matmul_load)
            except Exception as error:
                energy = Check(
                    "nvml.energy_counter", FAIL, f"raised {type(error).__name__}: {error}"
                )
                trace = EnergyTrace(process_error="the energy check did not run")
            checks.append(energy)
            checks.append(check_process_utilization(trace, os.getpid()))
            checks.append(guarded("cuda.placement", lambda: check_placement(backend)))
            checks.append(guarded("cuda.sync", lambda: check_sync(torch)))
    finally:
        backend.shutdown()
    work = work_dir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    environment["work_dir"] = str(work)
    checks.append(guarded("sampler.end_to_end", lambda: check_sampler(work)))
    checks.append(guarded("mps", lambda: check_mps(work)))
    for name in specs:
        checks.append(
            guarded(f"spec.{name}", partial(check_model_spec, name, work, spec_duration_s))
        )
    return checks, environment


def guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check that raised is a FAIL with the error, never a traceback that hides the rest."""
    try:
        return check()
    except Exception as error:
        return Check(name, FAIL, f"raised {type(error).__name__}: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--specs",
        nargs="*",
        default=list(MODEL_SPECS),
        help="spec names under specs/ to run on cuda (default: %(default)s)",
    )
    parser.add_argument(
        "--spec-duration-s",
        type=float,
        default=SPEC_DURATION_S,
        help="cap on each pipeline's loadgen.duration_s in those runs",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the CLI runs' run directories go (default: a new temporary folder, kept)",
    )
    arguments = parser.parse_args(argv)
    started = time.monotonic()
    checks, environment = run_checks(arguments.specs, arguments.spec_duration_s, arguments.work_dir)
    for check in checks:
        print(check.line(), flush=True)
    failed = [check.name for check in checks if check.status == FAIL]
    if all(check.status == SKIP for check in checks):
        print(f"no GPU checks ran: {checks[0].detail}" if checks else "no checks", flush=True)
    report = {
        "benchmark": "gpu_check",
        "ok": not failed,
        "failed": failed,
        "environment": environment,
        "elapsed_s": round(time.monotonic() - started, 1),
        "checks": [asdict(check) for check in checks],
    }
    line = json.dumps(report, default=str)
    print(line, flush=True)
    target = os.environ.get("GPU_CHECK_OUT")
    if target:
        Path(target).write_text(line + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

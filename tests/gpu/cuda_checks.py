"""The CUDA checks of `make gpu-check`: a worker's placement on one GPU, and the synchroniser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from stages.telemetry.gpu_backend import GpuBackend
from tests.gpu.check import FAIL, OK, Check


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

"""The one place a `GpuBackend` is chosen: real NVML, or the scripted fake for tests.

Production code never imports `stages.telemetry.fake_nvml` itself: the fake is imported here,
lazily, and only when env var `COLLOBENCH_FAKE_NVML=<script.json|yaml>` names a script (so a
spawned sampler process picks it up too).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from stages.telemetry.gpu_backend import GpuBackend, GpuError, GpuUnavailableError
from stages.telemetry.nvml_backend import NvmlBackend

log = logging.getLogger(__name__)

FAKE_NVML_ENV_VAR = "COLLOBENCH_FAKE_NVML"


def fake_nvml_from_env() -> Any | None:
    """The fake NVML module scripted by `COLLOBENCH_FAKE_NVML`, or None when it is unset."""
    path = os.environ.get(FAKE_NVML_ENV_VAR)
    if not path:
        return None
    from stages.telemetry.fake_nvml import FakeNvml  # a test double: loaded only on request

    return FakeNvml.from_file(path)


def open_gpu_backend() -> GpuBackend | None:
    """The fake NVML when `COLLOBENCH_FAKE_NVML` is set, else real NVML; None when there is no
    NVML library, driver or device (never raises for that). A broken fake script does raise."""
    try:
        backend = NvmlBackend(fake_nvml_from_env())
    except GpuUnavailableError as error:
        log.info("no GPU telemetry: %s", error)
        return None
    try:
        count = backend.device_count()
    except GpuError as error:
        log.warning("no GPU telemetry: cannot count devices: %s", error)
        count = 0
    if count == 0:
        backend.shutdown()
        return None
    return backend

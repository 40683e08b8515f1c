"""torch's build details (version, CUDA and cuDNN builds) for the run environment, from a
short-lived subprocess: importing torch in the launcher could initialise CUDA next to Dagster,
and costs seconds. A process probes each torch installation once."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

logger = logging.getLogger(__name__)

_TORCH_PROBE = """
import json
import torch
info = {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": None}
try:
    info["cudnn"] = torch.backends.cudnn.version()
except Exception:
    pass
print(json.dumps(info))
"""


_TORCH_BUILDS: dict[tuple[str, str, int], dict[str, object]] = {}
"""The torch probe's answers in this process, by `_torch_install` (a long-lived process, such as
the test session or a Dagster run worker, probes each installation once)."""


def _torch_install() -> tuple[str, str, int] | None:
    """Which torch installation this interpreter would import: its version and the modification
    time of its version.py (a reinstall changes it); None when torch is absent."""
    version = _installed_version("torch")
    if version is None:
        return None
    version_file = Path(str(metadata.distribution("torch").locate_file("torch/version.py")))
    return sys.executable, version, version_file.stat().st_mtime_ns


def start_torch_probe() -> subprocess.Popen[str] | None:
    """Start the torch subprocess early so it overlaps with the other probes (none when torch
    is absent or this installation was probed already)."""
    install = _torch_install()
    if install is None or install in _TORCH_BUILDS:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _TORCH_PROBE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def finish_torch_probe(
    process: subprocess.Popen[str] | None, deadline_s: float
) -> dict[str, object] | None:
    """torch version, its CUDA and cuDNN builds; None when torch is absent or too slow."""
    if process is None:
        install = _torch_install()
        known = _TORCH_BUILDS.get(install) if install else None
        return dict(known) if known else None
    try:
        output, _ = process.communicate(timeout=max(0.1, deadline_s - time.monotonic()))
    except subprocess.TimeoutExpired:
        logger.debug("torch probe exceeded its deadline")
        return None
    finally:
        if process.poll() is None:  # timed out or interrupted: never leave it behind
            process.kill()
            process.communicate()
    if process.returncode != 0:
        return None
    lines = output.strip().splitlines()
    if not lines:
        return None
    info = json.loads(lines[-1])
    if not isinstance(info, dict):
        return None
    install = _torch_install()
    if install is not None:
        _TORCH_BUILDS[install] = dict(info)
    return info


def _installed_version(name: str) -> str | None:
    """A distribution's installed version, without importing it (None when absent)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

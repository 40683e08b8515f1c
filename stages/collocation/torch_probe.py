"""torch's build details (version, CUDA and cuDNN builds) for the run environment, from a
short-lived subprocess: importing torch in the launcher could initialise CUDA next to Dagster,
and costs seconds (4-10 s on a loaded machine, the longest step of a model-less run's
start-up). A process probes each torch installation once, and the answer is kept in the cache
folder (CACHE_FILE) for the next run: an installation is its interpreter, torch's version, the
modification time of its version.py (a reinstall changes it) and the cuDNN wheel's version."""

from __future__ import annotations

import json
import logging
import os
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


CACHE_FILE = "torch_build.json"
"""The last installation probed and its answer, in the cache folder (stages.settings)."""
_CUDNN_WHEELS = ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")

Install = tuple[str, str, int, str]
_TORCH_BUILDS: dict[Install, dict[str, object]] = {}
"""The torch probe's answers in this process, by `_torch_install` (a long-lived process, such as
the test session or a Dagster run worker, probes each installation once)."""


def _torch_install() -> Install | None:
    """Which torch installation this interpreter would import: its version, the modification
    time of its version.py (a reinstall changes it) and the cuDNN wheels' versions; None when
    torch is absent."""
    version = _installed_version("torch")
    if version is None:
        return None
    version_file = Path(str(metadata.distribution("torch").locate_file("torch/version.py")))
    cudnn = ",".join(f"{name}=={_installed_version(name)}" for name in _CUDNN_WHEELS)
    return sys.executable, version, version_file.stat().st_mtime_ns, cudnn


def _read_cache(cache_dir: Path, install: Install) -> dict[str, object] | None:
    """The cached answer for `install`; None when there is none, or one for another."""
    try:
        cached = json.loads((cache_dir / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("install") != list(install):
        return None
    info = cached.get("info")
    return info if isinstance(info, dict) else None


def _write_cache(cache_dir: Path, install: Install, info: dict[str, object]) -> None:
    """Keep the answer for the next run (atomically: a temporary file, then a rename)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        temporary = cache_dir / f"{CACHE_FILE}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps({"install": list(install), "info": info}))
        os.replace(temporary, cache_dir / CACHE_FILE)
    except OSError as error:  # a read-only cache only costs the next run the probe
        logger.debug("torch probe answer not cached: %r", error)


def start_torch_probe(cache_dir: Path | None = None) -> subprocess.Popen[str] | None:
    """Start the torch subprocess early so it overlaps with the other probes (none when torch
    is absent, or this installation was probed already in this process or, per `cache_dir`,
    by an earlier run)."""
    install = _torch_install()
    if install is None or install in _TORCH_BUILDS:
        return None
    cached = _read_cache(cache_dir, install) if cache_dir is not None else None
    if cached is not None:
        _TORCH_BUILDS[install] = cached
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _TORCH_PROBE],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def finish_torch_probe(
    process: subprocess.Popen[str] | None, deadline_s: float, cache_dir: Path | None = None
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
        if cache_dir is not None:
            _write_cache(cache_dir, install, info)
    return info


def _installed_version(name: str) -> str | None:
    """A distribution's installed version, without importing it (None when absent)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

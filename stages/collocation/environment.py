"""What the machine and software looked like during a run, for `manifest.json`.

Every probe is best effort: a probe that fails yields None, and `capture_environment` never
raises, because a missing detail must not cost a benchmark run. Torch is never imported in this
process (importing it here could initialise CUDA next to Dagster); its build details come from a
short-lived subprocess instead (stages.collocation.torch_probe).

Fingerprints for comparing runs: `packages_sha256` is the sha256 of every installed
distribution as sorted `name==version` lines (names normalised as PEP 503 does: lower case,
runs of `-_.` as one `-`), with `packages_count` lines; it is read from each distribution's
METADATA header, not through importlib's email parser (~10 ms instead of ~150 ms for 225
distributions). `server_programs` maps the Python distribution each of the run's services runs
(a service type's `distribution`: transformers.serve -> transformers, vllm.serve -> vllm,
sglang.serve -> sglang) to its version in this interpreter, None when it is not installed here
(vllm is started from PATH, which may be another installation; llama.cpp, external and
command servers run no distribution of ours and are not listed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from stages.collocation.torch_probe import finish_torch_probe
from stages.collocation.torch_probe import start_torch_probe as _start_torch_probe

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Distributions whose versions change benchmark results (names as pip knows them).
KEY_PACKAGES = (
    "collobench",
    "torch",
    "torchvision",
    "transformers",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnx",
    "numpy",
    "pandas",
    "pyarrow",
    "duckdb",
    "pydantic",
    "mlflow",
    "dagster",
    "nvidia-ml-py",
    "psutil",
)

# Environment variables that change how kernels, thread pools and devices behave.
ENV_PREFIXES = (
    "CUDA_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "PYTORCH_",
    "TORCH_",
    "COLLOBENCH_",
    "NVIDIA_",
    "KMP_",
    "CUBLAS_",
    "CUDNN_",
    "NCCL_",
    "HF_",
    "MALLOC_",
)
ENV_NAMES = ("PYTHONHASHSEED",)

# A variable whose name contains one of these (case-insensitive) is dropped, never recorded
# ("PASS" covers PASSWORD, PASSWD and PASSPHRASE).
SECRET_MARKERS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASS",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "SESSION",
    "COOKIE",
    "SIGNATURE",
)
MIN_MASKED_SECRET_CHARS = 6
"""The value of a secret-named variable this long or longer is also masked wherever it appears
inside a recorded value (`OMP_X=$AWS_SECRET_ACCESS_KEY`); shorter ones would mask noise."""

TORCH_PROBE_TIMEOUT_S = 20.0
GIT_TIMEOUT_S = 10.0


# user:password@ inside a URL value, e.g. HF_ENDPOINT=https://me:pw@mirror
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
# a secret-looking query parameter inside a URL value, e.g. ...?access_token=abc&x=1
_URL_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;][^=&;#\s]*(?:token|key|secret|pass|sig|auth|credential)[^=&;#\s]*=)"
    r"[^&;#\s]+",
    re.IGNORECASE,
)


def _probe(name: str, function: Callable[[], T]) -> T | None:
    """Run one probe; any failure is logged at debug level and becomes None."""
    try:
        return function()
    except Exception as error:  # a probe must never cost the run
        logger.debug("environment probe %s failed: %r", name, error)
        return None


def is_secret_name(name: str) -> bool:
    """True when a variable's name looks like it holds a secret (SECRET_MARKERS)."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def redact_secrets(
    mapping: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Drop entries whose name looks like a secret; mask credentials embedded in URL values
    (user:password@, secret-named query parameters) and the value of any secret-named
    variable of `environ` (default: `mapping`) found inside a kept value."""
    source = mapping if environ is None else environ
    planted = sorted(
        {
            str(value)
            for name, value in source.items()
            if is_secret_name(name) and len(str(value)) >= MIN_MASKED_SECRET_CHARS
        },
        key=len,
        reverse=True,  # the longest first, so a secret containing another is masked whole
    )
    kept: dict[str, str] = {}
    for name, value in mapping.items():
        if is_secret_name(name):
            continue
        text = _URL_USERINFO.sub(r"\g<scheme>***@", str(value))
        text = _URL_SECRET_PARAM.sub(r"\g<name>***", text)
        for secret in planted:
            text = text.replace(secret, "***")
        kept[name] = text
    return kept


def benchmark_environment_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that influence benchmark results, secrets removed, sorted by name."""
    source = os.environ if environ is None else environ
    relevant = {
        name: value
        for name, value in source.items()
        if name.upper().startswith(ENV_PREFIXES) or name.upper() in ENV_NAMES
    }
    return dict(sorted(redact_secrets(relevant, source).items()))


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent), without importing it."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
        except Exception:  # a broken dist-info must not cost the run
            versions[name] = None
    return versions


_NAME_RUNS = re.compile(r"[-_.]+")


def _header(text: str, key: str) -> str | None:
    """A field of a METADATA (or PKG-INFO) header: the lines before the first blank one."""
    for line in text.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        if name == key:
            return value.strip()
    return None


def _name_and_version(distribution: metadata.Distribution) -> str | None:
    """`name==version` of one installed distribution, its name normalised (PEP 503)."""
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    name, version = _header(text, "Name"), _header(text, "Version")
    if not name or not version:
        return None
    return f"{_NAME_RUNS.sub('-', name).lower()}=={version}"


def packages_fingerprint() -> dict[str, object]:
    """`packages_sha256` (every installed distribution as sorted `name==version` lines, joined
    by newlines) and `packages_count` (how many lines)."""
    lines = sorted(
        {line for d in metadata.distributions() if (line := _name_and_version(d)) is not None}
    )
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"packages_sha256": digest, "packages_count": len(lines)}


def server_programs(service_types: Iterable[str]) -> dict[str, str | None]:
    """The version of the distribution each service type runs (see the module docstring)."""
    from stages.services.registry import default_service_registry

    registry = default_service_registry()
    programs = {registry.get(name).distribution for name in service_types}
    return package_versions(tuple(sorted(name for name in programs if name is not None)))


def _text(value: object) -> object:
    """Old pynvml releases return bytes; the manifest needs JSON strings."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _nvidia() -> dict[str, object] | None:
    """Driver version and GPU models through NVML; None when NVML cannot start."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        driver = _text(_probe("nvml driver", pynvml.nvmlSystemGetDriverVersion))
        cuda_driver = _probe("nvml cuda driver", pynvml.nvmlSystemGetCudaDriverVersion)
        gpus: list[dict[str, object]] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = _probe("nvml memory", partial(pynvml.nvmlDeviceGetMemoryInfo, handle))
            gpus.append(
                {
                    "index": index,
                    "name": _text(_probe("nvml name", partial(pynvml.nvmlDeviceGetName, handle))),
                    "uuid": _text(_probe("nvml uuid", partial(pynvml.nvmlDeviceGetUUID, handle))),
                    "memory_total_bytes": int(memory.total) if memory is not None else None,
                }
            )
        return {"driver_version": driver, "cuda_driver_version": cuda_driver, "gpus": gpus}
    finally:
        _probe("nvml shutdown", pynvml.nvmlShutdown)


def _cpu_model() -> str | None:
    """CPU model name from /proc/cpuinfo (Linux), else what platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "Hardware", "Processor") and value.strip():
                return value.strip()
    return platform.processor() or None


def _physical_cores() -> int | None:
    """Physical core count (psutil, else distinct (physical id, core id) pairs of cpuinfo)."""
    try:
        import psutil

        count = psutil.cpu_count(logical=False)
        if count:
            return int(count)
    except ImportError:
        pass
    pairs: set[tuple[str, str]] = set()
    physical = "0"
    for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "physical id":
            physical = value.strip()
        elif name.strip() == "core id":
            pairs.add((physical, value.strip()))
    return len(pairs) or None


def _memory_total_bytes() -> int | None:
    """Total physical memory in bytes."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _read_first_line(path: str) -> str | None:
    file = Path(path)
    return (file.read_text().strip() or None) if file.exists() else None


def _cpu() -> dict[str, object]:
    """CPU model, core counts, the cores this process may use, and the frequency governor."""
    affinity = _probe("affinity", lambda: sorted(os.sched_getaffinity(0)))
    return {
        "model": _probe("cpu model", _cpu_model),
        "architecture": _probe("architecture", platform.machine),
        "logical_cores": _probe("logical cores", os.cpu_count),
        "physical_cores": _probe("physical cores", _physical_cores),
        "usable_cores": len(affinity) if affinity is not None else None,
        "frequency_governor": _probe(
            "governor",
            lambda: _read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        ),
    }


def _git(project_dir: Path) -> dict[str, object] | None:
    """Commit and dirtiness of project_dir; None when it is not a git work tree or git is missing.

    `commit` is None in a repository without commits. `dirty` counts changes to tracked files
    only, so run outputs left untracked inside the project do not mark every run dirty.
    """

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(project_dir), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    inside = git("rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    head = git("rev-parse", "--verify", "--quiet", "HEAD")
    commit = head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD")  # fails when detached
    return {
        "commit": commit,
        "dirty": dirty,
        "branch": (branch.stdout.strip() or None) if branch.returncode == 0 else None,
    }


def _os() -> dict[str, object]:
    uname = platform.uname()
    return {
        "system": uname.system,
        "release": uname.release,  # the kernel on Linux
        "version": uname.version,
        "platform": platform.platform(),
    }


def capture_environment(
    project_dir: Path, service_types: Iterable[str] = (), cache_dir: Path | None = None
) -> dict[str, object]:
    """Versions, hardware, host, git, environment variables, the programs of `service_types`
    (`services[].type`); never raises. `cache_dir` keeps torch's build (torch_probe)."""
    deadline_s = time.monotonic() + TORCH_PROBE_TIMEOUT_S
    torch_process = _probe("torch start", lambda: _start_torch_probe(cache_dir))
    environment: dict[str, object] = {
        "python": _probe(
            "python",
            lambda: {
                "version": platform.python_version(),
                "implementation": platform.python_implementation(),
                "executable": sys.executable,
            },
        ),
        "packages": _probe("packages", package_versions),
        **(_probe("packages fingerprint", packages_fingerprint) or {}),
        "server_programs": _probe("server programs", lambda: server_programs(service_types)),
        "cpu": _probe("cpu", _cpu),
        "memory_total_bytes": _probe("memory", _memory_total_bytes),
        "hostname": _probe("hostname", socket.gethostname),
        "os": _probe("os", _os),
        "git": _probe("git", lambda: _git(Path(project_dir))),
        "env": _probe("env", benchmark_environment_variables),
    }
    nvidia = _probe("nvml", _nvidia)
    environment["nvidia_driver_version"] = nvidia["driver_version"] if nvidia else None
    environment["nvidia_cuda_driver_version"] = nvidia["cuda_driver_version"] if nvidia else None
    environment["gpus"] = nvidia["gpus"] if nvidia else []
    torch_info = _probe("torch", lambda: finish_torch_probe(torch_process, deadline_s, cache_dir))
    environment["torch"] = torch_info
    environment["torch_cuda_version"] = torch_info.get("cuda") if torch_info else None
    environment["cudnn_version"] = torch_info.get("cudnn") if torch_info else None
    return environment

"""What a caller hands the launcher besides the spec (`RunOptions`), and the run id it makes
when none is given."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stages import settings
from stages.collocation.resident_workers import ResidentWorkers
from stages.collocation.results import PhaseSummarizer, ProgressCallback


@dataclass
class RunOptions:
    out_dir: Path
    cache_dir: Path
    project_dir: Path = field(default_factory=Path.cwd)
    mlflow_uri: str | None = None
    progress: ProgressCallback | None = None
    run_id: str | None = None
    summarize_phase: PhaseSummarizer | None = None
    """Computes a finished phase's figures from the run directory (injected by the CLI or
    Dagster, which may import the analysis layer; the launcher may not)."""
    log_to_mlflow: Callable[[Path, str], str | None] | None = None
    """Records the finished run at `mlflow_uri` and returns the MLflow run id (injected by the
    composition root, as `summarize_phase` is)."""
    lock_dir: Path = field(default_factory=settings.locks_dir)
    """Where the per-device locks live (see `device_locks`)."""
    device_wait_s: float = field(default_factory=settings.device_wait_s)
    """How long to wait for a device another benchmark holds before refusing to start."""
    environment: dict[str, object] | None = None
    """The environment a run minutes earlier captured on this machine, recorded as is instead
    of probing again (a capacity search's probes after the first: the probe costs seconds,
    over ten on a loaded machine, in every probe)."""
    host: str = field(default_factory=settings.host_id)
    """The host id the manifest records (`COLLOBENCH_HOST_ID`, else the host name)."""
    resident_workers: ResidentWorkers | None = None
    """Worker processes kept between this launcher's runs and the next ones (an A/B session's
    arm runs one short run per segment); None: every phase spawns its workers."""
    startup: dict[str, int] = field(default_factory=dict)
    """What happened before the launcher, monotonic ns: `process_start` (the origin of the
    manifest's `startup`; else the launcher's own start), `cli_ready`, `spec_loaded`
    (stages.collocation.startup)."""


def new_run_id(spec_name: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{spec_name}-{secrets.token_hex(3)}"

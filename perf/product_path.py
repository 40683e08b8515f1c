"""Perf figures through the product path: a spec run by `collobench run` in a subprocess, as
users start it (a launcher, a spawned worker, the samplers, the start barrier, the progress
reports), or materialised by Dagster (`python -m bench_defs.demo`: its `benchmark_run` asset
starts the same command as a Pipes child), with its recorded rows read back from the run
directory.

The in-process measurements (`run_pipeline` in the perf script's own process) isolate the
runtime; these say what a user gets. Each perf script that reports both pairs them round by
round, so the gap between the two paths is itself a figure. MLflow and the warehouse load are
off: both run after the load window and touch none of its figures.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from stages.rundir.tables import read_table
from stages.spec.models import PipelineSpec

RUN_TIMEOUT_S = 600


class ProductPathError(RuntimeError):
    """`collobench run` did not finish with a run directory holding `ok` results."""


def collobench_command() -> list[str]:
    """The `collobench` console script of this interpreter's environment (what users type);
    `python -m stages.cli` where the script is not installed."""
    script = Path(sys.executable).with_name("collobench")
    return [str(script)] if script.exists() else [sys.executable, "-m", "stages.cli"]


def spec_document(name: str, pipelines: list[PipelineSpec], **fields: Any) -> dict[str, Any]:
    """A spec file's content for `pipelines` (their non-default fields), plus top-level
    `fields` (e.g. `telemetry`)."""
    return {
        "name": name,
        "seed": 0,
        **fields,
        "pipelines": [p.model_dump(mode="json", exclude_defaults=True) for p in pipelines],
    }


def run_spec(
    document: dict[str, Any],
    work: Path,
    label: str,
    wrapper: list[str] | None = None,
    environment: dict[str, str] | None = None,
) -> Path:
    """Write `document` to `work/<label>.yaml`, run `collobench run` on it from `work` (a
    home of its own under it; `wrapper` before the command, e.g. `perf sched record --`;
    `environment` on top of this process's), and return the run directory. Raises
    ProductPathError with the output's tail when the run fails."""
    work.mkdir(parents=True, exist_ok=True)
    spec_file = work / f"{label}.yaml"
    spec_file.write_text(yaml.safe_dump(document, sort_keys=False))
    out = work / f"{label}-runs"
    command = [*(wrapper or []), *collobench_command(), "run", str(spec_file), "--out", str(out)]
    command += ["--no-mlflow", "--no-load"]
    child_environment = {
        **os.environ,
        "COLLOBENCH_HOME": str(work / "home"),
        "COLUMNS": "200",
        **(environment or {}),
    }
    completed = _run_to_end(command, work, child_environment)
    runs = sorted(out.iterdir()) if out.exists() else []
    return _the_run(completed, runs, f"collobench run {spec_file.name}")


def _run_to_end(
    command: list[str], cwd: Path, environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`command` run to its end (killed past RUN_TIMEOUT_S), started with every CPU."""
    with _every_cpu():
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()  # a launcher's workers die with it (PDEATHSIG)
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _the_run(completed: subprocess.CompletedProcess[str], runs: list[Path], what: str) -> Path:
    """The one run directory `what` left; ProductPathError with its output's tail when it
    failed or left none (or several)."""
    if completed.returncode != 0 or len(runs) != 1:
        tail = (completed.stdout[-1500:] + completed.stderr[-1500:]).strip()
        raise ProductPathError(f"{what}: exit {completed.returncode}\n{tail}")
    return runs[0]


@contextlib.contextmanager
def _every_cpu() -> Iterator[None]:
    """The calling thread may run on every CPU inside `with`, so a launcher started here
    is placed as one started from a shell (a perf script pinned to one core would otherwise
    pin the launcher with it; the spec's `placement` places the worker)."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def run_dagster(document: dict[str, Any], work: Path, label: str) -> Path:
    """Materialise `document` as the partition `label` through Dagster (`bench_defs.demo`:
    artefacts, `benchmark_run`, the warehouse and reports, on an instance under `work`), and
    return the run directory. Raises ProductPathError when it fails."""
    specs = work / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    (specs / f"{label}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    command = [sys.executable, "-m", "bench_defs.demo", "--partition", label]
    command += ["--specs-dir", str(specs)]
    environment = {**os.environ, "COLLOBENCH_HOME": str(work / "home"), "COLLOBENCH_MLFLOW": "0"}
    environment.pop("DAGSTER_HOME", None)  # the demo's instance lives in that home
    # bench_defs imports from the repository
    completed = _run_to_end(command, Path(__file__).resolve().parent.parent, environment)
    runs = sorted((work / "home" / "runs").glob("*"))
    return _the_run(completed, runs, f"Dagster {label}")


def measured_queries(run_dir: Path, pipeline: str, phase: str = "solo") -> pa.Table:
    """The measured (non-warm-up) query rows of `pipeline` in `phase` of trial 0."""
    table = read_table(run_dir, "queries")
    ours = pc.and_(
        pc.equal(table.column("pipeline"), pipeline), pc.equal(table.column("phase"), phase)
    )
    measured = pc.and_(pc.equal(table.column("trial"), 0), pc.invert(table.column("warmup")))
    keep = pc.and_(ours, measured)
    return table.filter(keep)

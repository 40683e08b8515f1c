"""`make demo` through Dagster: materialise the demo benchmark on the persistent instance the UI
reads, then say where everything is and how to open the UI.

    python -m bench_defs.demo [--partition demo] [--specs-dir specs]

1. `$DAGSTER_HOME` (default `$COLLOBENCH_HOME/dagster`, made absolute) is created with the
   instance configuration of `bench_defs/dagster.yaml` (telemetry off) and one run limit per
   device pool (`bench_defs.core.pools.write_instance_config`; no pools file: the pool `local`,
   limit 1); a non-empty `dagster.yaml` already there keeps everything but those limits.
2. The spec file `<specs-dir>/<partition>.yaml` is validated (a bad one: its problems, exit 2)
   and its partition of `spec_files` is added.
3. `artifacts_job` materialises the artefact assets the spec uses, and their upstream ones.
4. `benchmark_job` materialises `benchmark_run`, `warehouse` (with its checks) and the report
   assets for that partition.

Both jobs run in this process (`execute_in_process`) on `DagsterInstance.get()`, so the runs
and materialisations are recorded where `dagster dev` (`make ui`) finds them; the benchmark
itself still runs in its own Pipes child process group, whose output is copied here as it
comes. Exit status: 0 done, 1 a step failed (its error is printed), 2 invalid spec or pools
file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.assets.artifacts import ARTIFACT_NAMES, ARTIFACTS_GROUP
from bench_defs.assets.warehouse import metadata_value
from bench_defs.core.pools import PoolError, default_pool, write_instance_config
from bench_defs.core.resources import CollobenchResource
from bench_defs.core.specs import (
    SPEC_PARTITIONS,
    artifacts_used,
    devices_of,
    read_spec_state,
    run_tags,
)
from bench_defs.definitions import build_definitions
from stages import settings
from stages.contracts.errors import InvalidInputError, RunFailedError

DAGSTER_HOME_ENV = "DAGSTER_HOME"
UI_HINT = "open the UI: make ui  (dagster dev on http://127.0.0.1:3000)"
QUIET_LOGGERS: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Run config keeping Dagster's console logger to warnings: the demo prints its own progress
lines (every event is still in the instance's event log, which the UI shows)."""


@dataclass
class DemoResult:
    """What the demo materialised and where its files are."""

    partition: str
    dagster_home: Path
    artifacts: list[str] = field(default_factory=list)
    dagster_run_ids: list[str] = field(default_factory=list)
    run_id: str | None = None
    run_dir: Path | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    check_notes: dict[str, str] = field(default_factory=dict)

    @property
    def report_md(self) -> Path | None:
        return self.run_dir / "report.md" if self.run_dir else None

    @property
    def trace(self) -> Path | None:
        return self.run_dir / "trace.json" if self.run_dir else None

    def plots(self) -> list[Path]:
        return sorted(self.run_dir.glob("*.png")) if self.run_dir else []


class DemoError(RunFailedError):
    """A step of the demo failed (exit 1); the message is one line per problem."""


class DemoInputError(InvalidInputError, DemoError):
    """The demo's input (its spec file, the pool configuration) cannot be used (exit 2)."""


def dagster_home(collobench_home: Path | None = None) -> Path:
    """`$DAGSTER_HOME` when set, else `<COLLOBENCH_HOME>/dagster`; absolute (Dagster uses and
    deletes a temporary folder for a relative or missing one)."""
    configured = os.environ.get(DAGSTER_HOME_ENV)
    if configured:
        return Path(configured).absolute()
    return (collobench_home or settings.home()) / "dagster"


def prepare_dagster_home(folder: Path) -> Path:
    """Create the instance folder and write `dagster.yaml` there: `bench_defs/dagster.yaml`
    when there is none, with one run limit per device pool (a user's own file keeps everything
    but the pool limits). Returns the config file."""
    return write_instance_config(folder)


def _failure_lines(result: dg.ExecuteInProcessResult) -> list[str]:
    lines = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            error = event.step_failure_data.error
            message = error.message.strip() if error else "failed"
            lines.append(f"{event.step_key}: {message.splitlines()[0] if message else 'failed'}")
    return lines or [f"run {result.run_id} failed"]


def _valid_spec(resource: CollobenchResource, partition: str) -> dict[str, Any]:
    """The normalised spec of `partition`; DemoError (exit 2) when it is missing or invalid."""
    spec_path = resource.spec_file(partition)
    state = read_spec_state(partition, spec_path)
    if not spec_path.is_file():
        raise DemoInputError(f"{spec_path}: no such spec file")
    if state.normalized is None:
        raise DemoInputError("\n".join(state.problems))
    return state.normalized


def _artifact_keys(defs: dg.Definitions, spec: dict[str, Any]) -> list[dg.AssetKey]:
    """The artefact assets the spec uses and their upstream artefacts, in name order."""
    used = artifacts_used(spec, ARTIFACT_NAMES)
    if not used:
        return []
    selection = dg.AssetSelection.assets(*used).upstream() & dg.AssetSelection.groups(
        ARTIFACTS_GROUP
    )
    return sorted(selection.resolve(defs.resolve_asset_graph()), key=lambda k: k.to_user_string())


def _materialise_artifacts(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    keys: list[dg.AssetKey],
    result: DemoResult,
    echo: Callable[[str], None],
) -> None:
    """Step 1: `artifacts_job` for these keys; each artefact's hash, size and path echoed."""
    if not keys:
        echo("[1/2] artifacts_job: the spec uses no artefact")
        return
    names = ", ".join(key.to_user_string() for key in keys)
    echo(f"[1/2] artifacts_job: {names}")
    started = time.monotonic()
    built = defs.resolve_job_def("artifacts_job").execute_in_process(
        instance=instance,
        asset_selection=keys,
        run_config=QUIET_LOGGERS,
        raise_on_error=False,
    )
    result.dagster_run_ids.append(built.run_id)
    if not built.success:
        raise DemoError("\n".join(_failure_lines(built)))
    for event in built.get_asset_materialization_events():
        materialization = event.materialization
        metadata = dict(materialization.metadata)
        name = materialization.asset_key.to_user_string()
        result.artifacts.append(name)
        echo(
            f"      {name}: {metadata_value(metadata, 'content_hash')[:12]} "
            f"({metadata_value(metadata, 'size_bytes')} bytes) "
            f"{metadata_value(metadata, 'path')}"
        )
    echo(f"      done in {time.monotonic() - started:.1f} s")


def _materialise_benchmark(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    spec: dict[str, Any],
    result: DemoResult,
    echo: Callable[[str], None],
) -> None:
    """Step 2: `benchmark_job` for the partition; records the run, its folder and the checks."""
    partition = result.partition
    devices, pool = devices_of(spec), default_pool()
    echo(
        f"[2/2] benchmark_job[{partition}]: benchmark_run (Pipes child) -> warehouse "
        f"-> throughput, latency, perf_per_watt, contention; pool {pool.name}"
    )
    started = time.monotonic()
    benchmark = defs.resolve_job_def("benchmark_job").execute_in_process(
        instance=instance,
        partition_key=partition,
        tags=run_tags(devices, pool),
        run_config=QUIET_LOGGERS,
        raise_on_error=False,
    )
    result.dagster_run_ids.append(benchmark.run_id)
    if not benchmark.success:
        raise DemoError("\n".join(_failure_lines(benchmark)))
    for event in benchmark.get_asset_materialization_events():
        metadata = dict(event.materialization.metadata)
        if event.materialization.asset_key == dg.AssetKey("benchmark_run"):
            result.run_id = str(metadata_value(metadata, "run_id"))
            result.run_dir = Path(str(metadata_value(metadata, "run_dir")))
    for evaluation in benchmark.get_asset_check_evaluations():
        result.checks[evaluation.check_name] = evaluation.passed
        result.check_notes[evaluation.check_name] = str(evaluation.description or "")
    echo(f"      done in {time.monotonic() - started:.1f} s (Dagster run {benchmark.run_id})")


def run_demo(
    partition: str = "demo",
    specs_dir: Path | None = None,
    echo: Callable[[str], None] = print,
) -> DemoResult:
    """Materialise the spec `partition`'s artefacts and benchmark on `DagsterInstance.get()`
    (after `prepare_dagster_home`); raises DemoError with the reason when a step fails."""
    home = dagster_home()
    try:
        prepare_dagster_home(home)
    except PoolError as error:
        raise DemoInputError(str(error)) from None
    os.environ[DAGSTER_HOME_ENV] = str(home)
    resource = CollobenchResource(specs_dir=str(specs_dir.absolute()) if specs_dir else None)
    spec = _valid_spec(resource, partition)
    defs = build_definitions({"collobench": resource})
    keys = _artifact_keys(defs, spec)
    result = DemoResult(partition=partition, dagster_home=home)
    echo(f"Dagster instance: {home} (DAGSTER_HOME); home: {settings.home()}")
    with dg.DagsterInstance.get() as instance:
        if not instance.has_dynamic_partition(SPEC_PARTITIONS, partition):
            instance.add_dynamic_partitions(SPEC_PARTITIONS, [partition])
            echo(f"added partition {partition!r} of {SPEC_PARTITIONS}")
        _materialise_artifacts(defs, instance, keys, result, echo)
        _materialise_benchmark(defs, instance, spec, result, echo)
    return result


def summary_lines(result: DemoResult) -> list[str]:
    """The closing lines: where the run, its report, plots and trace are; the checks; the UI."""
    lines = [f"run directory: {result.run_dir}", f"report: {result.report_md}"]
    lines += [f"plot: {path}" for path in result.plots()]
    if result.trace is not None and result.trace.is_file():
        lines.append(f"trace: {result.trace} (opens in https://ui.perfetto.dev)")
    if result.checks:
        verdicts = ", ".join(
            f"{name} {'passed' if passed else 'FAILED'}" for name, passed in result.checks.items()
        )
        lines.append(f"checks: {verdicts}")
        lines += [
            f"check {name}: {result.check_notes.get(name, '')}"
            for name, passed in result.checks.items()
            if not passed
        ]
    lines.append(UI_HINT)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--partition", default="demo", help="Spec file stem to benchmark (default: demo)."
    )
    parser.add_argument(
        "--specs-dir",
        type=Path,
        default=None,
        help="Folder of the spec files (default: $COLLOBENCH_SPECS_DIR, else specs/).",
    )
    args = parser.parse_args(argv)
    # Dagster's preview/beta notes (Pipes internals) say nothing to a demo's reader.
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    try:
        result = run_demo(args.partition, args.specs_dir)
    except DemoError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print("--- the demo benchmark, through Dagster ---")
    for line in summary_lines(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

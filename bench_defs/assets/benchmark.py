"""`benchmark_run`: one dynamic partition per spec file; materialising it runs the benchmark.

The run is `collobench run` in a Pipes child process (`bench_defs.core.pipes_runner`) in its own
session, started by `GroupPipesClient`: Dagster never shares a process with the workers (or
CUDA), and cancelling the Dagster run ends the whole process group. The child reports the
run's figures as the materialisation's metadata; this step adds the Launchpad overrides and the
artefacts the spec used (with the content hash of each default recipe found built), and
depends on every artefact asset so lineage leads from model bytes to numbers.
"""

import datetime as dt
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.assets.artifacts import ARTIFACT_NAMES, default_params
from bench_defs.core.pools import check_run_pool
from bench_defs.core.resources import CollobenchResource, GroupPipesClient
from bench_defs.core.specs import (
    MAX_RUNTIME_TAG,
    BenchmarkRunConfig,
    artifacts_used,
    devices_of,
    max_runtime_s,
    read_spec_state,
    spec_partitions,
)

BENCHMARK_GROUP = "benchmark"


def collobench_run_id(partition_key: str, dagster_run_id: str) -> str:
    """The run directory's name: UTC time, the spec's partition key and the Dagster run id's
    first 8 characters, so a folder leads back to the Dagster run that made it."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{partition_key}-{dagster_run_id[:8]}"


def _with_overrides(path: Path, overrides: list[str], normalized: dict[str, Any]) -> dict[str, Any]:
    """The spec's normal form with the Launchpad overrides applied (`repeats` changes the
    phase count); the file's own when they do not apply (the run then fails saying why)."""
    from stages.validation.loading import SpecError, load_spec

    try:
        return load_spec(path, overrides).normalized
    except SpecError:
        return normalized


def _raise_if_device_busy(run_dir: Path) -> None:
    """A run the pre-flight refused (manifest status `device_busy`): a Failure that says so and
    names the foreign processes, instead of the bare exit code."""
    from stages.contracts.warnings import WarningCode
    from stages.rundir.manifest import DEVICE_BUSY, ManifestError, read_manifest

    try:
        manifest = read_manifest(run_dir)
    except ManifestError:
        return
    if manifest.status != DEVICE_BUSY:
        return
    processes = [
        w.message for w in manifest.warning_records if w.code == WarningCode.FOREIGN_COMPUTE_PROCESS
    ]
    raise dg.Failure(
        description=f"{DEVICE_BUSY}: refused before measuring: " + "; ".join(processes),
        metadata={
            "status": DEVICE_BUSY,
            "run_dir": dg.MetadataValue.path(str(run_dir)),
            "foreign_processes": dg.MetadataValue.md("\n".join(f"- {p}" for p in processes)),
        },
        allow_retries=False,
    )


def _artifact_hashes(collobench: CollobenchResource, names: list[str]) -> dict[str, str]:
    """name -> content hash of its default recipe when built here, else a note."""
    from stages.artifacts.registry import ARTIFACTS
    from stages.artifacts.store import ArtifactStore

    store = ArtifactStore(collobench.home_path() / "artifacts")
    hashes = {}
    for name in names:
        builder = ARTIFACTS.get(name)
        found = store.find(builder, store.params(builder, default_params(name)))
        hashes[name] = found.content_hash if found else "non-default recipe (see the manifest)"
    return hashes


@dg.asset(
    partitions_def=spec_partitions,
    deps=ARTIFACT_NAMES,
    group_name=BENCHMARK_GROUP,
    kinds={"python"},
    description="One benchmark of the spec file `specs/<partition>.yaml`: `collobench run` in "
    "its own process group through Dagster Pipes; metadata holds throughput, p50/p99 with "
    "95% intervals, energy source, run directory, spec hash and overrides.",
)
def benchmark_run(
    context: dg.AssetExecutionContext,
    config: BenchmarkRunConfig,
    collobench: CollobenchResource,
    pipes_client: GroupPipesClient,
) -> dg.MaterializeResult:
    key = context.partition_key
    pool = check_run_pool(context)  # an unknown pool fails here, before anything runs
    spec_path = collobench.spec_file(key)
    state = read_spec_state(key, spec_path)
    if not spec_path.is_file():
        raise dg.Failure(f"{spec_path}: no such spec file (partition {key!r})")
    if state.normalized is None:
        raise dg.Failure("invalid spec: " + "; ".join(state.problems))
    overrides = config.overrides(len(state.normalized["pipelines"]))
    devices = devices_of(state.normalized, config.device)
    run_id = collobench_run_id(key, context.run.run_id)
    runs = collobench.runs_path()
    runs.mkdir(parents=True, exist_ok=True)
    command = [
        collobench.python_executable(),
        "-m",
        "bench_defs.core.pipes_runner",
        "--spec",
        str(spec_path),
        "--out",
        str(runs),
        "--run-id",
        run_id,
    ]
    for override in overrides:
        command += ["--set", override]
    context.log.info(f"benchmark {key} as run {run_id}; overrides: {overrides or 'none'}")
    if MAX_RUNTIME_TAG not in context.run.tags:  # a Launchpad run: run monitoring's limit
        limit = str(max_runtime_s(_with_overrides(spec_path, overrides, state.normalized)))
        context.instance.add_run_tags(context.run.run_id, {MAX_RUNTIME_TAG: limit})
    try:
        invocation = pipes_client.run(context=context, command=command, env=collobench.child_env())
    except dg.Failure:
        _raise_if_device_busy(runs / run_id)
        raise
    reported = invocation.get_materialize_result()
    used = artifacts_used(state.normalized, ARTIFACT_NAMES)
    metadata: dict[str, Any] = {
        **(reported.metadata or {}),
        "devices_used": devices,
        "gpu_pool": pool,
        "launchpad_overrides": dg.MetadataValue.json(config.model_dump(exclude_none=True)),
        "artifacts_used": dg.MetadataValue.json(_artifact_hashes(collobench, used)),
    }
    return dg.MaterializeResult(metadata=metadata, data_version=reported.data_version)

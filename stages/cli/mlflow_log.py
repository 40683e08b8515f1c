"""Record a finished run directory in MLflow, for people who browse experiments there.

One parent MLflow run per benchmark run (spec as params, run files as artifacts) and one nested
child per (pipeline, phase) with the figures of the manifest's results (computed once, by the
analysis views), one value per trial (`step=trial`), and its SLO verdicts as tags
(`slo_verdict.<trial>`, and `slo_verdict`, the worst of them). The run directory stays the source of
truth: any MLflow failure is logged as a warning and the function returns None, so tracking can
never lose or fail a run. MLflow is imported lazily (about a second).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.cli.mlflow_client import (
    DEFAULT_EXPERIMENT,
    TAG_COMPLETE,
    TAG_KIND,
    TAG_PARENT,
    artifact_location_for,
    clean_key,
    delete_with_children,
    ensure_experiment,
    failed_on_error,
    log_params,
    logged_or_warned,
    open_client,
    param_value,
    text_tags,
)
from stages.contracts.counters import QUERY_COUNTS
from stages.rundir.layout import MANIFEST, table_files
from stages.rundir.manifest import Manifest, PipelineResult, read_manifest
from stages.rundir.schemas import TABLES

if TYPE_CHECKING:
    from mlflow import MlflowClient

logger = logging.getLogger(__name__)

TAG_RUN_ID = "run_id"

# Benchmark status -> MLflow run status.
_RUN_STATUS = {"ok": "FINISHED", "failed": "FAILED", "timeout": "FAILED", "interrupted": "KILLED"}
_STATUS_SEVERITY = ("ok", "timeout", "interrupted", "failed")
_VERDICT_SEVERITY = ("met", "undecided", "missed")
# The worker's own counts (warm-up included), logged only when a result has no summary.
_COUNT_FIELDS = (*QUERY_COUNTS, "not_issued")


# ---------------------------------------------------------------- params


def _segment(item: Mapping[str, Any], index: int, taken: set[str]) -> str:
    """List items are named by their `name` or `id` when unique (pipelines.classify.stages.model),
    else by position."""
    for field in ("name", "id"):
        label = item.get(field)
        if isinstance(label, str) and label and label not in taken:
            return label
    return str(index)


def flatten_params(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested spec -> {dotted.key: value}; lists of scalars stay one JSON value."""
    flat: dict[str, str] = {}

    def visit(node: Any, key: str) -> None:
        if isinstance(node, Mapping):
            if not node and key:
                flat[clean_key(key)] = "{}"
            for name, child in node.items():
                visit(child, f"{key}.{name}" if key else str(name))
        elif isinstance(node, list) and node and all(isinstance(i, Mapping) for i in node):
            taken: set[str] = set()
            for index, item in enumerate(node):
                label = _segment(item, index, taken)
                taken.add(label)
                visit(item, f"{key}.{label}" if key else label)
        elif key:
            flat[clean_key(key)] = param_value(node)

    visit(tree, prefix)
    return flat


# ---------------------------------------------------------------- metrics


def trial_metrics(result: PipelineResult) -> dict[str, float]:
    """Metrics of one (trial, phase, pipeline) result of the manifest: its `summary`, the
    figures the analysis views computed (so MLflow, the console, the manifest and the warehouse
    agree), as finite floats. Without a summary (a run launched without the analysis layer)
    only the worker's query counts the manifest holds are logged: no figure is computed a
    second way here."""
    values: list[tuple[str, float]] = (
        list(result.summary.items())
        if result.summary is not None
        else [
            (f"queries_{name}", getattr(result, name))
            for name in _COUNT_FIELDS
            if name in result.model_fields_set
        ]
    )
    return {key: float(value) for key, value in values if math.isfinite(value)}


def verdict_tags(results: list[PipelineResult]) -> dict[str, str]:
    """A (pipeline, phase)'s SLO verdicts as tags (the numbers, slo_met and slo_missed, are
    metrics): `slo_verdict.<trial>` per trial and `slo_verdict`, the worst of them (missed,
    then undecided, then met); none without an SLO."""
    by_trial = {r.trial: r.slo_verdict for r in results if r.slo_verdict is not None}
    if not by_trial:
        return {}
    tags: dict[str, str] = {f"slo_verdict.{trial}": v for trial, v in sorted(by_trial.items())}
    tags["slo_verdict"] = max(by_trial.values(), key=_VERDICT_SEVERITY.index)
    return tags


# ---------------------------------------------------------------- manifest helpers


def _millis(timestamp: object) -> int | None:
    """ISO-8601 wall time -> Unix milliseconds (MLflow's start and end times)."""
    if not isinstance(timestamp, str):
        return None
    try:
        return int(datetime.fromisoformat(timestamp).timestamp() * 1000)
    except ValueError:
        return None


def _worst_status(statuses: list[str]) -> str:
    known = [s for s in statuses if s in _STATUS_SEVERITY]
    if not known:
        return statuses[0] if statuses else "unknown"
    return max(known, key=_STATUS_SEVERITY.index)


# ---------------------------------------------------------------- MLflow


def _existing_parent(client: MlflowClient, experiment_id: str, run_id: str) -> str | None:
    """A complete earlier record of this run (returned as is); incomplete ones are deleted."""
    quoted = run_id.replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.{TAG_RUN_ID} = '{quoted}' and tags.`{TAG_KIND}` = 'run'",
    )
    for run in runs:
        if run.data.tags.get(TAG_COMPLETE) == "true":
            return str(run.info.run_id)
    delete_with_children(client, experiment_id, runs)  # interrupted earlier attempts
    return None


def _log_child(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    manifest: Manifest,
    pipeline: str,
    phase: str,
    results: list[PipelineResult],
) -> str:
    """One nested run for a (pipeline, phase): its spec as params, metrics per trial."""
    from mlflow.entities import Metric

    statuses = [r.status for r in results]
    errors = [r.error for r in results if r.error]
    tags = text_tags(
        {
            TAG_PARENT: parent_id,
            TAG_KIND: "pipeline_phase",
            TAG_RUN_ID: manifest.run_id,
            "pipeline": pipeline,
            "phase": phase,
            "status": _worst_status(statuses) if statuses else None,
            "error": errors[0][:5000] if errors else None,
            "energy.gpu_source": manifest.energy.gpu_source,
            "energy.host_source": manifest.energy.host_source,
            **verdict_tags(results),
        }
    )
    child = client.create_run(experiment_id, tags=tags, run_name=f"{pipeline}/{phase}")
    child_id = str(child.info.run_id)
    pipeline_spec = manifest.spec.pipeline(pipeline)
    if pipeline_spec is not None:
        log_params(client, child_id, flatten_params(pipeline_spec.as_written()))

    now_ms = int(time.time() * 1000)
    metrics = [
        Metric(key, value, now_ms, result.trial)
        for result in results
        for key, value in trial_metrics(result).items()
    ]
    client.log_batch(child_id, metrics=metrics)
    status = _RUN_STATUS.get(_worst_status(statuses), "FINISHED") if statuses else "FINISHED"
    client.set_terminated(child_id, status=status)
    return child_id


def _log_artifacts(client: MlflowClient, parent_id: str, run_dir: Path) -> None:
    """manifest.json and each table's files (stages.rundir.layout.table_files): the merged
    file, or the chunk files under parts/ when the run was never merged."""
    client.log_artifact(parent_id, str(run_dir / MANIFEST))
    for table in TABLES:
        for path in table_files(run_dir, table)[0]:
            folder = path.parent.relative_to(run_dir).as_posix()
            client.log_artifact(parent_id, str(path), None if folder == "." else folder)


def _parent_tags(manifest: Manifest, run_id: str, status: str) -> dict[str, str]:
    """The parent run's tags: identity, spec, status, commit and host."""
    environment = manifest.environment
    git = environment.git if environment is not None else None
    return text_tags(
        {
            TAG_KIND: "run",
            TAG_RUN_ID: run_id,
            "spec_name": manifest.name or manifest.spec.name,
            "spec_hash": manifest.spec_hash,
            "spec_source": manifest.spec_source,
            "status": status,
            "git_commit": git.commit if git is not None else None,
            "hostname": environment.hostname if environment is not None else None,
        }
    )


def _log(run_dir: Path, tracking_uri: str, experiment_name: str) -> str:
    manifest = read_manifest(run_dir)
    run_id = manifest.run_id or run_dir.name
    client = open_client(tracking_uri)
    experiment = ensure_experiment(client, experiment_name, artifact_location_for(tracking_uri))
    existing = _existing_parent(client, experiment, run_id)
    if existing is not None:
        logger.info("run %s is already in MLflow as %s", run_id, existing)
        return existing

    status = manifest.status or "unknown"
    parent = client.create_run(
        experiment,
        start_time=_millis(manifest.started_at),
        run_name=run_id,
        tags=_parent_tags(manifest, run_id, status),
    )
    parent_id = str(parent.info.run_id)
    with failed_on_error(client, parent_id):
        log_params(client, parent_id, flatten_params(manifest.spec.as_written()))
        pairs = sorted({(r.pipeline, r.phase) for r in manifest.results})
        for pipeline, phase in pairs:
            mine = [r for r in manifest.results if (r.pipeline, r.phase) == (pipeline, phase)]
            _log_child(client, experiment, parent_id, manifest, pipeline, phase, mine)
        _log_artifacts(client, parent_id, run_dir)
        client.set_tag(parent_id, TAG_COMPLETE, "true")
        client.set_terminated(
            parent_id,
            status=_RUN_STATUS.get(status, "FINISHED"),
            end_time=_millis(manifest.ended_at),
        )
    return parent_id


def log_run_to_mlflow(
    run_dir: Path, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT
) -> str | None:
    """Log one run directory to MLflow; returns the parent MLflow run id, or None (with a
    warning) on any failure, since tracking must never lose or fail a benchmark run.

    Idempotent: a run already logged completely is found by its `run_id` tag and its id
    returned; a record left half-written by an earlier failure is deleted and logged afresh.
    """
    run_dir = Path(run_dir)
    return logged_or_warned(
        lambda: _log(run_dir, tracking_uri, experiment),
        f"run {run_dir}",
        "run directory",
        tracking_uri,
        logger,
    )

"""Record a finished run directory in MLflow, for people who browse experiments there.

One parent MLflow run per benchmark run (spec as params, run files as artifacts) and one nested
child per (pipeline, phase) with the figures of the manifest's results (computed once, by the
analysis views), one value per trial (`step=trial`), and its SLO verdicts as tags
(`slo_verdict.<trial>`, and `slo_verdict`, the worst of them). The run directory stays the source of
truth: any MLflow failure is logged as a warning and the function returns None, so tracking can
never lose or fail a run. MLflow is imported lazily (about a second).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.contracts.counters import QUERY_COUNTS
from stages.rundir.layout import MANIFEST, TABLES, table_files
from stages.rundir.manifest import Manifest, PipelineResult, read_manifest

if TYPE_CHECKING:
    from mlflow import MlflowClient

logger = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "collobench"
ARTIFACTS_DIR_NAME = "mlartifacts"

# MLflow's limits (mlflow.utils.validation); ours are applied before MLflow sees the values.
MAX_PARAM_VALUE_CHARS = 6000
MAX_KEY_CHARS = 250

# Tags that identify our runs, so logging the same run directory twice reuses the first record.
TAG_RUN_ID = "run_id"
TAG_KIND = "collobench.kind"  # run | pipeline_phase
TAG_COMPLETE = "collobench.complete"  # "true" once every child, metric and artifact is logged
TAG_PARENT = "mlflow.parentRunId"  # what mlflow.start_run(nested=True) sets

# Benchmark status -> MLflow run status.
_RUN_STATUS = {"ok": "FINISHED", "failed": "FAILED", "timeout": "FAILED", "interrupted": "KILLED"}
_STATUS_SEVERITY = ("ok", "timeout", "interrupted", "failed")
_VERDICT_SEVERITY = ("met", "undecided", "missed")
# The worker's own counts (warm-up included), logged only when a result has no summary.
_COUNT_FIELDS = (*QUERY_COUNTS, "not_issued")
_NOISY_LOGGERS = ("mlflow", "alembic", "sqlalchemy")


def _sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, else None."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    return Path(tracking_uri[len(prefix) :].split("?", 1)[0])


def artifact_location_for(tracking_uri: str) -> str | None:
    """Artifacts beside a sqlite store (`<dir>/mlartifacts`), not in the CWD's ./mlruns;
    None lets a tracking server choose."""
    database = _sqlite_path(tracking_uri)
    if database is None:
        return None
    return (database.expanduser().resolve().parent / ARTIFACTS_DIR_NAME).as_uri()


@contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """Silence MLflow meanwhile: migration chatter, run-URL prints, and its own tracebacks of
    errors that reach us anyway (we report them once, as one warning)."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    # Importing mlflow configures its loggers (level INFO); import first, then quieten.
    import mlflow  # noqa: F401

    saved = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"mlflow(\.|$)")
            warnings.filterwarnings("ignore", module=r"alembic(\.|$)")
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


# ---------------------------------------------------------------- params


def _clean_key(key: str) -> str:
    """A key MLflow accepts: its allowed characters only, no empty path parts, <= 250 chars."""
    allowed = "".join(c if c.isalnum() or c in "_-. :" else "_" for c in key)
    parts = [part.strip() or "_" for part in allowed.split(".")]
    return ".".join(parts)[:MAX_KEY_CHARS]


def _param_value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:MAX_PARAM_VALUE_CHARS]


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
                flat[_clean_key(key)] = "{}"
            for name, child in node.items():
                visit(child, f"{key}.{name}" if key else str(name))
        elif isinstance(node, list) and node and all(isinstance(i, Mapping) for i in node):
            taken: set[str] = set()
            for index, item in enumerate(node):
                label = _segment(item, index, taken)
                taken.add(label)
                visit(item, f"{key}.{label}" if key else label)
        elif key:
            flat[_clean_key(key)] = _param_value(node)

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


def _tags(values: Mapping[str, object]) -> dict[str, str]:
    return {key: str(value) for key, value in values.items() if value is not None}


# ---------------------------------------------------------------- MLflow


def _experiment_id(client: MlflowClient, name: str, artifact_location: str | None) -> str:
    """Get or create the experiment (restoring it if someone deleted it)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location))
        except Exception:  # another process created it first
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    return str(experiment.experiment_id)


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
    for run in runs:  # an interrupted earlier attempt: replace it rather than duplicate it
        children = client.search_runs(
            [experiment_id], filter_string=f"tags.`{TAG_PARENT}` = '{run.info.run_id}'"
        )
        for child in children:
            client.delete_run(child.info.run_id)
        client.delete_run(run.info.run_id)
    return None


def _log_params(client: MlflowClient, mlflow_run_id: str, params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    client.log_batch(mlflow_run_id, params=[Param(k, v) for k, v in params.items()])


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
    tags = _tags(
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
        _log_params(client, child_id, flatten_params(pipeline_spec.as_written()))

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
    return _tags(
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


def _log(run_dir: Path, tracking_uri: str, experiment: str) -> str:
    from mlflow import MlflowClient

    manifest = read_manifest(run_dir)
    run_id = manifest.run_id or run_dir.name

    database = _sqlite_path(tracking_uri)
    if database is not None:
        database.expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = _experiment_id(client, experiment, artifact_location_for(tracking_uri))
    existing = _existing_parent(client, experiment_id, run_id)
    if existing is not None:
        logger.info("run %s is already in MLflow as %s", run_id, existing)
        return existing

    status = manifest.status or "unknown"
    parent = client.create_run(
        experiment_id,
        start_time=_millis(manifest.started_at),
        run_name=run_id,
        tags=_parent_tags(manifest, run_id, status),
    )
    parent_id = str(parent.info.run_id)
    try:
        _log_params(client, parent_id, flatten_params(manifest.spec.as_written()))
        pairs = sorted({(r.pipeline, r.phase) for r in manifest.results})
        for pipeline, phase in pairs:
            mine = [r for r in manifest.results if (r.pipeline, r.phase) == (pipeline, phase)]
            _log_child(client, experiment_id, parent_id, manifest, pipeline, phase, mine)
        _log_artifacts(client, parent_id, run_dir)
        client.set_tag(parent_id, TAG_COMPLETE, "true")
        client.set_terminated(
            parent_id,
            status=_RUN_STATUS.get(status, "FINISHED"),
            end_time=_millis(manifest.ended_at),
        )
    except BaseException:
        with suppress(Exception):  # mark the half-written record; a retry replaces it
            client.set_terminated(parent_id, status="FAILED")
        raise
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
    try:
        with _quiet_mlflow():
            return _log(run_dir, tracking_uri, experiment)
    except Exception as error:
        lines = str(error).strip().splitlines()
        logger.warning(
            "could not log run %s to MLflow at %s (the run directory is unaffected): %s: %s",
            run_dir,
            tracking_uri,
            type(error).__name__,
            lines[0][:500] if lines else "",
        )
        logger.debug("MLflow failure in full", exc_info=True)
        return None

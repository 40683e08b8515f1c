"""What recording in MLflow needs whatever is recorded (a run directory, stages/cli/mlflow_log.py;
a capacity search, stages/cli/mlflow_capacity.py): the client and its experiment, MLflow's
limits on keys and values, the tags that mark our records, quiet MLflow, replacing a half-written
record, and the rule that tracking never fails the caller (any error is one warning and None).
MLflow is imported lazily (about a second)."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient

DEFAULT_EXPERIMENT = "collobench"
ARTIFACTS_DIR_NAME = "mlartifacts"

# MLflow's limits (mlflow.utils.validation); ours are applied before MLflow sees the values.
MAX_PARAM_VALUE_CHARS = 6000
MAX_KEY_CHARS = 250

# Tags that identify our records, so logging the same thing twice reuses the first record.
TAG_KIND = "collobench.kind"  # run | pipeline_phase | capacity_search | capacity_probe
TAG_COMPLETE = "collobench.complete"  # "true" once every child, metric and artifact is logged
TAG_PARENT = "mlflow.parentRunId"  # what mlflow.start_run(nested=True) sets

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


def open_client(tracking_uri: str) -> MlflowClient:
    """A client of `tracking_uri` (a sqlite store's folder is created first)."""
    from mlflow import MlflowClient

    database = _sqlite_path(tracking_uri)
    if database is not None:
        database.expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=tracking_uri)


@contextmanager
def quiet_mlflow() -> Iterator[None]:
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


def logged_or_warned(
    log: Callable[[], str], what: str, directory: str, tracking_uri: str, logger: logging.Logger
) -> str | None:
    """`log()` with MLflow quiet: the MLflow run id it returns, or None after one warning on
    `logger` for any failure (`what` was not logged; `directory`, its kind of directory, is
    unaffected), since tracking must never lose or fail what it records."""
    try:
        with quiet_mlflow():
            return log()
    except Exception as error:
        lines = str(error).strip().splitlines()
        logger.warning(
            "could not log %s to MLflow at %s (the %s is unaffected): %s: %s",
            what,
            tracking_uri,
            directory,
            type(error).__name__,
            lines[0][:500] if lines else "",
        )
        logger.debug("MLflow failure in full", exc_info=True)
        return None


def clean_key(key: str) -> str:
    """A key MLflow accepts: its allowed characters only, no empty path parts, <= 250 chars."""
    allowed = "".join(c if c.isalnum() or c in "_-. :" else "_" for c in key)
    parts = [part.strip() or "_" for part in allowed.split(".")]
    return ".".join(parts)[:MAX_KEY_CHARS]


def param_value(value: object) -> str:
    """A param's value as MLflow holds it: text (JSON unless a string), cut to its limit."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:MAX_PARAM_VALUE_CHARS]


def text_tags(values: Mapping[str, object]) -> dict[str, str]:
    """Tags as text, the None ones left out."""
    return {key: str(value) for key, value in values.items() if value is not None}


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None) -> str:
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


def log_params(client: MlflowClient, mlflow_run_id: str, params: Mapping[str, str]) -> None:
    from mlflow.entities import Param

    client.log_batch(mlflow_run_id, params=[Param(k, v) for k, v in params.items()])


def delete_with_children(client: MlflowClient, experiment_id: str, runs: Iterable[Any]) -> None:
    """Delete `runs` (MLflow runs), each with its nested children: an earlier record that is
    to be replaced rather than duplicated."""
    for run in runs:
        children = client.search_runs(
            [experiment_id], filter_string=f"tags.`{TAG_PARENT}` = '{run.info.run_id}'"
        )
        for child in children:
            client.delete_run(child.info.run_id)
        client.delete_run(run.info.run_id)


@contextmanager
def failed_on_error(client: MlflowClient, parent_id: str) -> Iterator[None]:
    """Mark the parent record FAILED when logging its parts raises (a retry replaces it)."""
    try:
        yield
    except BaseException:
        with suppress(Exception):
            client.set_terminated(parent_id, status="FAILED")
        raise

"""Resources of the code location: where collobench keeps things, the DuckDB warehouse, and the
Pipes client that runs a benchmark as its own process group.

Every default comes from `stages.settings` and is resolved when a step runs (not when the
location loads), so `$COLLOBENCH_HOME` set for a run, a test or a deployment is honoured.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from stages import settings
from stages.process_groups import end_group, start_group

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from analysis.warehouse.loader import LoadResult

SPECS_DIR_ENV = "COLLOBENCH_SPECS_DIR"
"""Folder of the spec files that become `benchmark_run` partitions (default `specs/`)."""
RUNS_DIR_ENV = "COLLOBENCH_RUNS_DIR"
"""Folder of the run directories (default `runs/` in `$COLLOBENCH_RESULTS_DIR`, else in the
home)."""


def default_specs_dir() -> Path:
    """`$COLLOBENCH_SPECS_DIR`, else `specs/` in the working directory (the repository root
    under `dagster dev`)."""
    return Path(os.environ.get(SPECS_DIR_ENV, "specs")).absolute()


class CollobenchResource(dg.ConfigurableResource):
    """Where collobench reads specs and writes runs; unset fields follow `stages.settings`
    (`$COLLOBENCH_HOME`, default `.collobench/`) and `$COLLOBENCH_SPECS_DIR`."""

    home: str | None = Field(
        default=None,
        description="Home folder of runs, artefacts and the warehouse (default: settings, where "
        "$COLLOBENCH_RESULTS_DIR may move the runs, searches and warehouse elsewhere).",
    )
    specs_dir: str | None = Field(
        default=None, description="Folder whose *.yaml files are the benchmark_run partitions."
    )
    python: str | None = Field(
        default=None, description="Python interpreter of the Pipes child (default: this one)."
    )
    runs_dir: str | None = Field(
        default=None,
        description="Folder of run directories (default: $COLLOBENCH_RUNS_DIR, else "
        "<home>/runs when home is set, else <results dir>/runs); on Kubernetes the shared "
        "object-storage mount.",
    )

    def home_path(self) -> Path:
        return Path(self.home).absolute() if self.home else settings.home()

    def runs_path(self) -> Path:
        """Where run directories go: `runs_dir`, else `$COLLOBENCH_RUNS_DIR`, else `<home>/runs`
        when `home` is set, else the settings' (`$COLLOBENCH_RESULTS_DIR/runs`, the folder a
        cluster's hosts share). On Kubernetes every pod mounts the shared bucket at the same
        path, so a run directory recorded by one pod is read by the next (deploy/k8s/)."""
        if self.runs_dir:
            return Path(self.runs_dir).absolute()
        if os.environ.get(RUNS_DIR_ENV):
            return Path(os.environ[RUNS_DIR_ENV]).absolute()
        return self.home_path() / "runs" if self.home else settings.runs_dir()

    def specs_path(self) -> Path:
        return Path(self.specs_dir).absolute() if self.specs_dir else default_specs_dir()

    def spec_file(self, partition_key: str) -> Path:
        """The spec file of a partition (key = file stem)."""
        return self.specs_path() / f"{partition_key}.yaml"

    def python_executable(self) -> str:
        return self.python or sys.executable

    def child_env(self) -> dict[str, str]:
        """Environment of a child process: the home made explicit, so the child writes where
        this resource says even if the step's environment differs."""
        return {settings.HOME_ENV: str(self.home_path())}


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse: runs are loaded through `analysis.warehouse.loader.load_runs` (the one
    writer; it serialises writers), every read goes through a read-only connection."""

    path: str | None = Field(
        default=None,
        description="DuckDB file (default: results.duckdb in $COLLOBENCH_RESULTS_DIR, else in "
        "$COLLOBENCH_HOME).",
    )

    def db_path(self) -> Path:
        return Path(self.path).absolute() if self.path else settings.duckdb_path()

    def load(self, run_dirs: Sequence[Path]) -> list[LoadResult]:
        """Load run directories (idempotent: a run loaded again replaces its rows)."""
        from analysis.warehouse.loader import load_runs

        return load_runs(list(run_dirs), self.db_path())

    @contextlib.contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection, closed on exit; it can never change or lock the warehouse."""
        from analysis.warehouse.reader import connect_read_only

        connection = connect_read_only(self.db_path())
        try:
            yield connection
        finally:
            connection.close()

    def report(self, run_id: str, views: list[str] | None = None) -> dict[str, pd.DataFrame]:
        """One DataFrame per report view (`views`, default all) for the run
        (analysis.reports.report)."""
        from analysis.reports.report import report

        return report(self.db_path(), run_id, views)


class GroupPipesClient(dg.ConfigurableResource):
    """Runs a Pipes child in a NEW SESSION (its own process group), so ending it ends every
    process it started (the benchmark's workers and samplers), which the stock
    `PipesSubprocessClient` does not: it sends SIGINT to the direct child only.

    The child's stdout and stderr are read line by line and copied to this step's stdout (the
    run's compute logs) as they come, so the child never blocks on a full pipe (the stock client
    with `forward_stdio=False` hung past ~64 KB). On cancellation or any error the group gets
    SIGTERM, then SIGKILL after `termination_grace_s`; after a normal exit, any process left in
    the group is killed too."""

    termination_grace_s: float = Field(
        default=20.0,
        gt=0,
        description="Seconds between SIGTERM to the child's process group and SIGKILL "
        "(the launcher stops its workers within ~5 s of SIGTERM).",
    )

    def run(
        self,
        *,
        context: dg.AssetExecutionContext,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> dg.PipesClientCompletedInvocation:
        """Run `command` under a Pipes session and wait; raises a `dagster.Failure` on a
        non-zero exit. Returns the invocation (its materialisation results)."""
        with dg.open_pipes_session(
            context=context,
            context_injector=dg.PipesTempFileContextInjector(),
            message_reader=dg.PipesTempFileMessageReader(),
            extras=dict(extras or {}),
        ) as session:
            process = start_group(
                command,
                cwd=cwd,
                env={
                    **os.environ,
                    **(env or {}),
                    # `collobench run` ends (manifest: interrupted, "parent died") if this
                    # process dies: a SIGKILLed Celery worker or run worker leaves no orphan.
                    settings.PARENT_PID_ENV: str(os.getpid()),
                    **session.get_bootstrap_env_vars(),
                },
                stdout=subprocess.PIPE,
            )
            drain = threading.Thread(
                target=_copy_lines, args=(process,), name="pipes-stdout", daemon=True
            )
            drain.start()
            try:
                returncode = process.wait()
            except BaseException:  # cancelled (DagsterExecutionInterruptedError) or failed
                context.log.info(
                    f"ending the benchmark's process group {process.pid} "
                    f"(SIGTERM, SIGKILL after {self.termination_grace_s:g} s)"
                )
                end_group(process, self.termination_grace_s)
                raise
            finally:
                end_group(process, 0.0)  # anything the child left behind
                drain.join(timeout=5)
            if returncode != 0:
                # (dagster does not export DagsterPipesExecutionError: naming it raised
                # AttributeError instead of this message)
                raise dg.Failure(
                    f"the Pipes child process exited with code {returncode}; see the run's logs"
                )
        return dg.PipesClientCompletedInvocation(session)


def _copy_lines(process: subprocess.Popen[bytes]) -> None:
    """Copy the child's output to our stdout line by line (captured as compute logs)."""
    assert process.stdout is not None
    for line in iter(process.stdout.readline, b""):
        sys.stdout.write(line.decode("utf-8", "replace"))
        sys.stdout.flush()

"""A real change found and attributed to the machine: the same spec run five times, then three
times with a CPU hog sharing the pipeline's core. The history reports a regression of its
throughput and names the machine (the calibration score on the pipeline's core moved)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from analysis.history.verdicts import history_connection
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from tests.helpers import run

CORE = 1
QUIET_RUNS, HOG_RUNS = 5, 3


def crunch_spec() -> dict[str, Any]:
    """One CPU-bound pipeline on CORE, never idle (closed loop, two queries in flight, 2 ms
    of work each): a busy loop on the same core takes up to half its time, which shows in its
    throughput (its median latency hides it: most 2 ms queries fit in one time slice)."""
    return {
        "name": "hog-test",
        "seed": 3,
        "collocation": {"mode": "cpu_pinned"},
        "telemetry": {"idle_baseline_s": 0},
        "pipelines": [
            {
                "name": "crunch",
                "placement": {"cpus": [CORE]},
                "loadgen": {"type": "closed_loop", "concurrency": 2, "duration_s": 1.5},
                "stages": [{"id": "work", "type": "busy", "config": {"ms": 2}}],
            }
        ],
    }


@contextmanager
def cpu_hog(core: int) -> Iterator[None]:
    """A busy loop pinned to `core` for the block's duration (stopped by process group). It
    stays in this session: with the kernel's autogroups (on by default) a busy loop in a session
    of its own takes little from the processes of another one."""
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"],
        process_group=0,
    )
    try:
        yield
    finally:
        os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()


# Eight real runs (26 s of the serial session) whose verdict needs the five quiet ones quiet:
# anything else on that core (mypy beside `make test`, another session) reads as a change too.
# `make soak` runs it (perf/soak.py); `make test` keeps the attribution to the machine on
# recorded histories (tests/analysis/test_verdicts.py::test_a_slower_machine_is_attributed_to_
# the_calibration).
@pytest.mark.soak
@pytest.mark.spawns
@pytest.mark.serial
def test_a_cpu_hog_on_the_pipelines_core_is_a_regression_of_the_machine(tmp_path: Path) -> None:
    runs = [run(crunch_spec(), tmp_path).run_dir for _ in range(QUIET_RUNS)]
    with cpu_hog(CORE):
        runs += [run(crunch_spec(), tmp_path).run_dir for _ in range(HOG_RUNS)]
    db_path = tmp_path / "results.duckdb"
    load_runs(runs, db_path)
    connection = connect_read_only(db_path)
    try:
        found = connection.execute("SELECT any_value(spec_hash) FROM runs").fetchone()
        assert found is not None
        spec_hash = str(found[0])
        history = history_connection(connection, spec_hash, metric="queries_per_s")
    finally:
        connection.close()
    assert len(history) == QUIET_RUNS + HOG_RUNS
    flagged = history[history["verdict"] == "regressed"]
    shown = history[["run_seq", "value", "calibration_score", "verdict", "detail"]].to_string()
    assert len(flagged) == 1, shown
    change = flagged.iloc[0]
    assert change["change_pct"] < -25  # the hog takes up to half the core
    assert change["cause"].startswith("machine: calibration score -"), change["cause"]
    # The change started at the first run with the hog.
    assert history["change_point"].tolist().index(True) == QUIET_RUNS, shown

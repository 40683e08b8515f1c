"""The manifest's `startup` (stages.collocation.startup): the process start read from /proc,
the record's seconds, the first measured query read back from `queries`, and a real run's
breakdown in order; and the start-up cuts that keep it short (a spawned child does not run
the console script again, pyarrow builds a run's tables without importing pandas)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.collocation.startup import (
    LAUNCHER_START,
    PROCESS_START,
    StartupClock,
    first_measured_scheduled_ns,
)
from stages.rundir.manifest import read_manifest
from stages.rundir.tables import read_table
from tests.noop_run import NoopCollocatedRun
from tests.paths import REPO


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.spawns
def test_the_process_start_is_read_on_the_monotonic_clock() -> None:
    before_ns = time.monotonic_ns()
    done = python(
        "import time; first = time.monotonic_ns()\n"
        "from stages.collocation.startup import process_start_ns\n"
        "print(process_start_ns(), first)"
    )
    started_ns, first_ns = map(int, done.stdout.split())
    # /proc counts clock ticks (10 ms at the usual 100 Hz): 20 ms either side.
    assert before_ns - 20_000_000 <= started_ns <= first_ns + 20_000_000


def test_the_record_is_seconds_from_the_origin() -> None:
    given = {PROCESS_START: 1_000_000_000, "cli_ready": 1_500_000_000, "spec_loaded": 1_750_000_000}
    clock = StartupClock(given)
    marks = clock.phase(0, "solo", ["a"])
    marks |= {"spawned": 2_000_000_000, "ready": 3_000_000_000, "started": 3_250_000_000}
    record = clock.record()
    assert record["origin"] == PROCESS_START and record["origin_ns"] == 1_000_000_000
    assert (record["cli_ready_s"], record["spec_loaded_s"]) == (0.5, 0.75)
    assert record["environment_probed_s"] is None
    assert record["phases"] == [
        {
            "trial": 0,
            "phase": "solo",
            "pipelines": ["a"],
            "spawned_s": 1.0,
            "ready_s": 2.0,
            "calibrated_s": None,
            "started_s": 2.25,
        }
    ]
    # Without a process start (Dagster, a capacity probe) the launcher's start is the origin.
    alone = StartupClock({}).record()
    assert alone["origin"] == LAUNCHER_START and alone["launcher_s"] == 0.0
    assert alone["cli_ready_s"] is None


def test_the_first_measured_query_skips_warm_up_and_other_phases(tmp_path: Path) -> None:
    table = pa.table(
        {
            "trial": [0, 0, 0, 0, 1],
            "phase": ["solo", "solo", "solo", "collocated", "solo"],
            "scheduled_ns": [5, 7, 9, 1, 2],
            "warmup": [True, False, False, False, False],
        }
    )
    pq.write_table(table, tmp_path / "queries.parquet")
    assert first_measured_scheduled_ns(tmp_path, 0, "solo") == 7
    assert first_measured_scheduled_ns(tmp_path, 0, "idle") is None
    assert first_measured_scheduled_ns(tmp_path / "none", 0, "solo") is None


@pytest.mark.spawns
@pytest.mark.slow
def test_a_run_breaks_its_start_up_down_in_order(noop_collocated_run: NoopCollocatedRun) -> None:
    """`python -m stages.cli run`: every step's seconds from the exec, in the order they
    happen, and the first measured query as the queries table has it."""
    run_dir = noop_collocated_run.run_dir
    startup = read_manifest(run_dir).startup
    assert startup is not None and startup.origin == PROCESS_START
    steps = [startup.cli_ready_s, startup.spec_loaded_s, startup.launcher_s]
    assert steps == sorted(step or -1.0 for step in steps)  # each set, and in order
    assert [(p.trial, p.phase, p.pipelines) for p in startup.phases] == [
        (0, "solo", ["front"]),
        (0, "solo", ["back"]),
        (0, "collocated", ["front", "back"]),
    ]
    for phase in startup.phases:
        marks = [phase.spawned_s, phase.ready_s, phase.calibrated_s, phase.started_s]
        assert marks == sorted(mark or -1.0 for mark in marks)
    first = startup.phases[0]
    assert startup.launcher_s is not None and first.spawned_s is not None
    assert startup.launcher_s <= first.spawned_s
    queries = read_table(run_dir, "queries").to_pandas()
    measured = queries[(queries.phase == "solo") & (queries.pipeline == "front") & ~queries.warmup]
    expected_s = round((int(measured.scheduled_ns.min()) - startup.origin_ns) / 1e9, 3)
    assert startup.first_measured_query_s == expected_s
    assert first.started_s is not None and expected_s >= first.started_s


CONSOLE_SCRIPT = """
import json, multiprocessing, sys
from stages.cli.app import _spawned_children_skip_the_console_script
REPORT = "import json, sys; open(%r, 'w').write(json.dumps(sorted(sys.modules)))"
if __name__ == "__main__":
    if sys.argv[2] == "fixed":
        _spawned_children_skip_the_console_script()
    child = multiprocessing.get_context("spawn").Process(target=exec, args=(REPORT % sys.argv[1],))
    child.start()
    child.join()
"""


@pytest.mark.spawns
def test_a_spawned_child_of_the_console_script_does_not_run_it_again(tmp_path: Path) -> None:
    """A script like the console script (`from stages.cli.app import app` at its top): its
    spawned child imports the CLI again, unless the CLI named its `__main__` first."""
    script = tmp_path / "collobench"
    script.write_text(CONSOLE_SCRIPT)
    imported = {}
    for case in ("fixed", "unfixed"):
        report = tmp_path / f"{case}.json"
        subprocess.run(
            [sys.executable, str(script), str(report), case],
            cwd=REPO,
            timeout=120,
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        imported[case] = "stages.cli.app" in json.loads(report.read_text())
    assert imported == {"fixed": False, "unfixed": True}


@pytest.mark.spawns
def test_a_run_s_tables_are_built_without_importing_pandas(tmp_path: Path) -> None:
    """After `skip_pandas_check`: arrays, typed scalars and a Parquet file, no pandas; asked
    for pandas output, pyarrow imports it as usual."""
    done = python(
        "import sys\n"
        "from stages.rundir.arrow_pandas import skip_pandas_check\n"
        "skip_pandas_check()\n"
        "import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq\n"
        "status = pa.array([0, 1, 0], type=pa.int8())\n"
        "ok = pc.equal(status, pa.scalar(0, type=pa.int8()))\n"
        "index = pa.array([0, 1, 0], type=pa.int32())\n"
        "names = pa.array(['ok', 'failed'], type=pa.string()).take(index)\n"
        f"pq.write_table(pa.table({{'s': names, 'ok': ok}}), {str(tmp_path / 'x.parquet')!r})\n"
        "print('pandas' in sys.modules)\n"
        f"frame = pq.read_table({str(tmp_path / 'x.parquet')!r}).to_pandas()\n"
        "print(list(frame.s), 'pandas' in sys.modules)"
    )
    assert done.stdout.split("\n")[:2] == ["False", "['ok', 'failed', 'ok'] True"]

"""A stage thread waiting for its next query does not wake to hand over its rows (its take has
no timeout): the recorder's writer takes them once they are overdue, so they reach disk within
a flush period, while the run goes on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.rundir.layout import part_files
from stages.runtime.driver import run_pipeline
from stages.runtime.recorder import DRAIN_TICK_S, FLUSH_PERIOD_NS
from stages.spec.models import PipelineSpec

EARLY_QUERIES = 20
LAST_OFFSET_MS = 4_000


@pytest.mark.slow
def test_an_idle_stage_threads_rows_are_on_disk_within_a_flush_period(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    offsets = [*range(EARLY_QUERIES), LAST_OFFSET_MS]
    trace.write_text("offset_ms\n" + "".join(f"{offset}\n" for offset in offsets))
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {"type": "trace", "trace": str(trace), "timeout_s": 60},
            "stages": [{"id": "a", "type": "noop"}],
        }
    )
    run_dir = tmp_path / "run"
    keys = {"run_id": "r", "trial": 0, "phase": "solo", "pipeline": "p"}
    runner = threading.Thread(
        target=run_pipeline, args=(spec,), kwargs={"run_dir": run_dir, "keys": keys}
    )
    started = time.monotonic()
    runner.start()
    deadline_s = FLUSH_PERIOD_NS / 1e9 + DRAIN_TICK_S + 1.0  # + 1 s for a loaded machine
    on_disk = 0
    while time.monotonic() - started < deadline_s and on_disk < EARLY_QUERIES:
        time.sleep(0.05)
        on_disk = sum(
            pq.read_metadata(chunk).num_rows for chunk in part_files(run_dir, "stage_events")
        )
    seen_after_s = time.monotonic() - started
    runner.join(LAST_OFFSET_MS / 1e3 + 30)
    assert on_disk == EARLY_QUERIES, f"{on_disk} rows on disk after {seen_after_s:.2f} s"
    assert seen_after_s < LAST_OFFSET_MS / 1e3  # while the thread still waited, not at the end

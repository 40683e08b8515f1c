"""Issue 21 in Dagster: a benchmark the pre-flight refuses (a foreign compute process on its
device) is a failed run that says `device_busy` and names the process, with nothing
materialised; and a benchmark run's `dagster/max_runtime` comes from its spec's timeouts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.assets.benchmark import benchmark_run
from bench_defs.core.pools import LOCAL_POOL
from bench_defs.core.specs import (
    MAX_RUNTIME_TAG,
    PHASE_MARGIN_S,
    RUN_MARGIN_S,
    SPEC_PARTITIONS,
    max_runtime_s,
    phase_count,
    run_tags,
)
from stages.collocation.phase_plan import phases_of
from stages.validation.loading import validate_document
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import foreign_process


@pytest.fixture
def foreign() -> Iterator[int]:
    """The pid of a stranger's process on the GPU (tests.helpers.foreign_process)."""
    with foreign_process() as pid:
        yield pid


def pipeline(name: str, timeout_s: float) -> dict[str, Any]:
    loadgen = {"type": "server", "rate": 10, "duration_s": 1, "timeout_s": timeout_s}
    return {"name": name, "loadgen": loadgen, "stages": [{"id": "s", "type": "noop"}]}


@pytest.mark.parametrize(
    ("count", "collocation", "repeats"),
    [
        (1, {}, 3),
        (2, {}, 1),
        (2, {"solo_baselines": False}, 2),
        (3, {"subsets": "pairs"}, 2),
        (4, {"subsets": "all"}, 1),
        (4, {"subsets": "pairs", "solo_baselines": False}, 1),
    ],
)
def test_phase_count_is_the_launchers_plan(
    count: int, collocation: dict[str, Any], repeats: int
) -> None:
    doc = {
        "name": "plan",
        "repeats": repeats,
        "collocation": collocation,
        "pipelines": [pipeline(f"p{i}", 30) for i in range(count)],
    }
    loaded = validate_document(doc, "test")
    assert phase_count(loaded.normalized) == len(phases_of(loaded.spec))


def test_max_runtime_is_phases_times_the_longest_timeout_plus_services_and_margins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")
    doc = {
        "name": "served",
        "repeats": 2,
        "telemetry": {"idle_baseline_s": 10},
        "pipelines": [pipeline("a", 30), pipeline("b", 50)],
        "services": [
            {"name": "own", "type": "command", "command": ["x"], "ready": {"timeout_s": 40}},
            {"name": "far", "type": "external", "url": "http://127.0.0.1:9"},
        ],
    }
    normalized = validate_document(doc, "test").normalized
    # 2 trials x (2 solo + 1 collocated) = 6 phases, each bounded by the 50 s timeout.
    expected = 6 * (50 + PHASE_MARGIN_S) + 40 + 10 + RUN_MARGIN_S
    assert max_runtime_s(normalized) == expected == 1370
    assert run_tags("cpu", LOCAL_POOL, normalized)[MAX_RUNTIME_TAG] == "1370"
    assert MAX_RUNTIME_TAG not in run_tags("cpu", LOCAL_POOL)  # no spec: the asset adds it


@pytest.mark.spawns
def test_a_busy_device_fails_the_run_as_device_busy_naming_the_process(
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    specs_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    foreign: int,
) -> None:
    script = tmp_path / "gpu.json"
    gpu = {"uuid": "GPU-fake-0", "processes": [{"pid": foreign, "used_memory_mib": 64}]}
    script.write_text(json.dumps({"devices": [gpu]}))
    monkeypatch.setenv("COLLOBENCH_FAKE_NVML", str(script))
    spec = tiny_spec("busy")
    spec["pipelines"][0]["device"] = "cuda:0"
    write_spec(specs_dir, "busy", spec)
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["busy"])
    result = dg.materialize(
        [benchmark_run],
        partition_key="busy",
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    assert result.get_asset_materialization_events() == []
    failure = next(e for e in result.all_events if e.is_step_failure)
    error = failure.step_failure_data.error
    assert error is not None
    message = str(error.message)
    assert "device_busy" in message and f"pid {foreign} (sleep) on GPU 0" in message
    # A Launchpad run (no tag) gets its max runtime from the asset.
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    loaded = validate_document(spec, "busy")
    assert run.tags[MAX_RUNTIME_TAG] == str(max_runtime_s(loaded.normalized))

"""The launcher's manifest writer: what it writes is what the readers' model accepts, a key the
model does not know fails at the write (not silently in a reader), and the file is the plain
`json.dumps(default=str)` text it always was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stages.collocation.manifest_writer import RunState, manifest_of, write_manifest
from stages.collocation.results import PipelineOutcome
from stages.contracts.counters import QueryCounters
from stages.rundir.layout import MANIFEST
from stages.rundir.manifest import ManifestError, PipelineResult, read_manifest
from stages.validation.loading import load_spec
from tests.helpers import REPO


def _record(results: list[PipelineOutcome]) -> RunState:
    return RunState(
        run_id="run-1",
        status="running",
        started_at="2026-01-01T00:00:00+00:00",
        ended_at=None,
        clock={"monotonic_ns": 1, "wall_time_ns": 2},
        timeline=[{"what": "phase", "trial": 0, "phase": "solo", "start_ns": 5, "end_ns": 9}],
        environment={"hostname": "box", "python": Path("/usr/bin/python3")},
        energy={"gpu_source": None, "host_source": "rapl"},
        warnings=["one"],
        results=results,
    )


def _manifest(results: list[PipelineOutcome]) -> dict[str, Any]:
    loaded = load_spec(REPO / "specs" / "noop_collocated.yaml")
    return manifest_of(loaded, loaded.spec, _record(results))


def test_the_written_manifest_reads_back_through_the_model(tmp_path: Path) -> None:
    outcome = PipelineOutcome(0, "solo", "front", status="ok")
    outcome.counters = QueryCounters(issued=3, ok=3)
    outcome.summary = {"queries_per_s": 12.5}
    manifest = _manifest([outcome])
    write_manifest(tmp_path, manifest)
    text = (tmp_path / MANIFEST).read_text()
    assert text == json.dumps(manifest, indent=2, default=str)
    read = read_manifest(tmp_path)
    assert read.run_id == "run-1" and read.results[0].ok == 3
    assert read.environment is not None and read.environment.hostname == "box"


def test_a_key_the_model_does_not_know_fails_at_the_write(tmp_path: Path) -> None:
    manifest = _manifest([PipelineOutcome(0, "solo", "front")])
    manifest["results"][0]["errors_total"] = 1
    with pytest.raises(ManifestError, match=r"results\.0\.errors_total"):
        write_manifest(tmp_path, manifest)
    assert not (tmp_path / MANIFEST).exists()


def test_an_unknown_top_level_key_fails_at_the_write(tmp_path: Path) -> None:
    manifest = _manifest([]) | {"launcher_only": True}
    with pytest.raises(ManifestError, match="launcher_only"):
        write_manifest(tmp_path, manifest)


def test_a_pipeline_outcome_has_exactly_the_fields_a_manifest_result_writes() -> None:
    """PipelineOutcome (the launcher's, mutated while a phase runs) and PipelineResult (the
    readers') are two classes sharing the counters (stages.contracts.counters); the outcome's
    row and the result's written fields, in order, must stay the same."""
    written = [name for name, field in PipelineResult.model_fields.items() if not field.exclude]
    assert list(PipelineOutcome(0, "solo", "front").row()) == written

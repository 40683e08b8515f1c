"""RunCalibration: one measurement per distinct set of cores (and GPU placement), one row per
pipeline, a timeline span per boundary; a calibration that fails is a warning and no row."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stages.collocation import calibration_run
from stages.collocation.calibration_run import RunCalibration
from stages.contracts.warnings import WarningCode
from stages.rundir.tables import read_table
from stages.spec.models import BenchmarkSpec
from stages.telemetry.calibration import GpuUnavailable
from stages.validation.loading import validate_document

CORE = min(os.sched_getaffinity(0))


def _spec(**calibration: Any) -> BenchmarkSpec:
    def pipeline(name: str, **fields: Any) -> dict[str, Any]:
        loadgen = {"type": "closed_loop", "duration_s": 1}
        return {"name": name, "loadgen": loadgen, "stages": [{"id": "s", "type": "noop"}], **fields}

    document = {
        "name": "calibrated",
        "telemetry": {"calibration": {"chunk_ms": 1, "duration_ms": 3, **calibration}},
        "pipelines": [
            pipeline("a"),
            pipeline("b"),
            pipeline("pinned", placement={"cpus": [CORE]}),
            pipeline("gone", placement={"cpus": [100_000]}),
            pipeline("gpu", device="cuda:0"),
        ],
    }
    return validate_document(document, "test").spec


def _no_gpu(*args: Any) -> list[Any]:
    raise GpuUnavailable("no GPU score: no cuda")


def test_each_set_of_cores_is_measured_once_and_failures_are_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration_run, "gpu_scores", _no_gpu)
    spec = _spec()
    run_dir = tmp_path / "run-1"
    timeline: list[dict[str, Any]] = []
    warnings: list[str] = []
    calibration = RunCalibration(spec, run_dir, timeline, warnings)
    calibration.boundary(0, "collocated", spec.pipelines, "before")
    calibration.boundary(0, "collocated", spec.pipelines[:1], "after")

    rows = read_table(run_dir, "calibration").to_pylist()
    assert {(r["pipeline"], r["position"], r["workload"]) for r in rows} == {
        ("a", "before", "cpu_loop"),
        ("b", "before", "cpu_loop"),
        ("gpu", "before", "cpu_loop"),  # a cuda pipeline's cores too
        ("pinned", "before", "cpu_loop"),
        ("a", "after", "cpu_loop"),
    }
    assert {r["run_id"] for r in rows} == {"run-1"} and {r["trial"] for r in rows} == {0}
    assert all(r["score"] > 0 and r["start_ns"] < r["end_ns"] for r in rows)
    before = [r for r in rows if r["position"] == "before"]
    shared = {(r["start_ns"], r["score"]) for r in before if r["pipeline"] in ("a", "b", "gpu")}
    assert len(shared) == 1  # no placement: one measurement of the same cores
    assert [(e["what"], e["pipelines"]) for e in timeline] == [
        ("calibration", ["a", "b", "pinned", "gone", "gpu"]),
        ("calibration", ["a"]),
    ]
    assert all(e["start_ns"] <= r["start_ns"] for e in timeline[:1] for r in before)
    failed = [w for w in warnings if getattr(w, "code", None) == WarningCode.CALIBRATION_FAILED]
    assert len(failed) == len(warnings) == 2, warnings
    assert "cpu_loop of gone" in failed[0] and "not available" in failed[0]
    assert "gpu_gemm, gpu_copy of gpu" in failed[1] and "no cuda" in failed[1]
    assert failed[1].details["position"] == "before"  # type: ignore[attr-defined]


def test_disabled_calibration_measures_nothing(tmp_path: Path) -> None:
    spec = _spec(enabled=False)
    timeline: list[dict[str, Any]] = []
    warnings: list[str] = []
    RunCalibration(spec, tmp_path / "run", timeline, warnings).boundary(
        0, "solo", spec.pipelines, "before"
    )
    assert timeline == [] and warnings == []
    assert not (tmp_path / "run").exists()

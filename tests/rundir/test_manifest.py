"""The manifest model (stages.rundir.manifest): its committed JSON Schema is the model's, a real
run's manifest fits both, and the lenient reading of older and partial manifests holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stages.contracts.slo_verdict import slo_verdict_by_counts
from stages.rundir.layout import MANIFEST
from stages.rundir.manifest import (
    SCHEMA_FILE,
    Manifest,
    ManifestError,
    manifest_json_schema,
    parse_manifest,
    read_manifest,
)
from tests.helpers import REPO


def test_the_committed_json_schema_is_the_models() -> None:
    """Regenerate with `python -m stages.rundir.manifest` after changing the model."""
    assert json.loads(SCHEMA_FILE.read_text()) == manifest_json_schema()


def test_every_field_of_the_manifest_is_described() -> None:
    undocumented = [name for name, field in Manifest.model_fields.items() if not field.description]
    assert undocumented == []


@pytest.fixture(scope="module")
def real_manifest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The manifest of a real two-pipeline run of the shipped spec (short load windows, an SLO
    on `front`), as the CLI's launcher wrote it, with the analysis views' summaries."""
    out = tmp_path_factory.mktemp("runs")
    command = [
        sys.executable, "-m", "stages.cli", "run", "specs/noop_collocated.yaml",
        "--out", str(out), "--run-id", "real", "--no-load", "--no-mlflow",
        "--set", "pipelines.0.loadgen.duration_s=0.5",
        "--set", "pipelines.1.loadgen.duration_s=0.5",
        "--set", "pipelines.0.loadgen.slo_ms=1000",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    document: dict[str, Any] = json.loads((out / "real" / MANIFEST).read_text())
    return document


@pytest.mark.spawns
def test_a_real_runs_manifest_validates(real_manifest: dict[str, Any]) -> None:
    manifest = Manifest.model_validate(real_manifest)
    assert manifest.run_id == "real" and manifest.status == "ok"
    assert [p.name for p in manifest.spec.pipelines] == ["front", "back"]
    assert {r.phase for r in manifest.results} == {"solo", "collocated"}
    assert all(r.summary and "queries_per_s" in r.summary for r in manifest.results)
    assert [entry.what for entry in manifest.timeline].count("phase") == 3
    # The SLO verdict the launcher attached is the one the summary's counts give; none
    # without an SLO.
    for result in manifest.results:
        figures = result.summary or {}
        if result.pipeline == "back":
            assert result.slo_verdict is None and "queries_over_slo" not in figures
            continue
        assert figures["slo_ms"] == 1000.0
        counts = (int(figures["queries_measured"]), int(figures["queries_over_slo"]))
        assert result.slo_verdict == slo_verdict_by_counts(*counts, figures["target_percentile"])
    # Every key of the file is a field of the model (nothing kept only as an extra).
    assert set(real_manifest) == set(Manifest.model_fields)
    for result in real_manifest["results"]:
        assert set(result) <= set(type(manifest.results[0]).model_fields)


@pytest.mark.spawns
def test_a_real_runs_manifest_fits_the_committed_json_schema(
    real_manifest: dict[str, Any],
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(real_manifest, json.loads(SCHEMA_FILE.read_text()))


@pytest.mark.spawns
def test_the_spec_reads_back_as_written(real_manifest: dict[str, Any]) -> None:
    """The spec keeps every key it had and gains none of the model's defaults."""
    manifest = Manifest.model_validate(real_manifest)
    assert manifest.spec.as_written() == real_manifest["spec"]
    partial = parse_manifest({"run_id": "r", "spec": {"pipelines": [{"name": "a"}]}})
    assert partial.spec.as_written() == {"pipelines": [{"name": "a"}]}
    assert partial.spec.telemetry.host.period_ms == 100.0  # the spec's default
    assert partial.spec.pipelines[0].device == "cpu"


def test_an_older_manifest_still_reads() -> None:
    """Before seeds, timeline and overrides; results with the removed p99_ms and energy_j."""
    older = {
        "format_version": 1,
        "run_id": "old",
        "name": "old",
        "spec": {"name": "old", "pipelines": []},
        "status": "ok",
        "results": [
            {"trial": 0, "phase": "solo", "pipeline": "a", "status": "ok", "p99_ms": 3.0,
             "energy_j": None},
        ],
    }  # fmt: skip
    manifest = parse_manifest(older)
    assert manifest.timeline == [] and manifest.seeds == {} and manifest.overrides == []
    assert "p99_ms" not in manifest.results[0].model_dump()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"status": "ok"}, "run_id"),
        ({"run_id": "r", "stauts": "ok"}, "stauts"),
        ({"run_id": "r", "results": [{"trial": 0, "phase": "solo", "pipeline": "a",
                                      "erors": 1}]}, "results.0.erors"),
        ({"run_id": "r", "energy": {"gpu": "nvml"}}, "energy.gpu"),
    ],
    ids=["no-run-id", "misspelt-key", "misspelt-result-key", "unknown-energy-key"],
)  # fmt: skip
def test_a_manifest_that_does_not_fit_is_a_one_line_error(
    document: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(document, "somewhere/manifest.json")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("somewhere/manifest.json:")
    assert problem in message


def test_reading_a_directory_without_a_manifest_says_so(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"no manifest\.json"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(ManifestError, match="unreadable manifest"):
        read_manifest(tmp_path)


def test_plain_string_warnings_of_an_older_manifest_read_as_records() -> None:
    from stages.contracts.warnings import WarningCode

    older = {"run_id": "r", "warnings": ["foreign compute process on the GPU: pid 7 (x)", "x"]}
    manifest = parse_manifest(older)
    assert [(w.code, w.message) for w in manifest.warning_records] == [
        (WarningCode.FOREIGN_COMPUTE_PROCESS, "foreign compute process on the GPU: pid 7 (x)"),
        (WarningCode.OTHER, "x"),
    ]
    assert manifest.warnings == older["warnings"]
    # As written today: both keys; a line added to `warnings` alone gets its record too.
    written = json.loads(manifest.model_dump_json())
    written["warnings"].append("added by hand")
    again = parse_manifest(written)
    assert again.warnings == [*older["warnings"], "added by hand"]
    assert again.warning_records[:2] == manifest.warning_records

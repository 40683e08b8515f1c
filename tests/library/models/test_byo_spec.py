"""`specs/byo_model.yaml` through `collobench run`, as a user runs it: the trained digits_cnn
through PyTorch, ONNX Runtime (the digits_cnn_onnx artefact) and torch.export (digits_cnn_pt2),
collocated, each grading whole passes of the test split, so the three report one accuracy:
the artefact's own test count per pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.helpers import REPO

PASSES = 2
QUERIES_PER_PASS = 9  # 360 test images in batches of 40
PIPELINES = ("pytorch", "onnx", "torch_export")


@pytest.mark.spawns
@pytest.mark.slow
def test_the_three_backends_report_the_same_accuracy(tmp_path: Path) -> None:
    queries = QUERIES_PER_PASS * (PASSES + 1)  # one pass of warm-up, then PASSES graded
    overrides = ["collocation.solo_baselines=false"]
    for index in range(len(PIPELINES)):
        loadgen = f"pipelines[{index}].loadgen"
        overrides += [f"{loadgen}.min_queries={queries}", f"{loadgen}.max_queries={queries}"]
    home = tmp_path / "home"
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "run", "specs/byo_model.yaml", "--no-mlflow"]
        + [arg for override in overrides for arg in ("--set", override)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
        env={**os.environ, "COLLOBENCH_HOME": str(home)},
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    (run_dir,) = (home / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # The spec names the files by artefact; the normal form keeps the names (recipe-hashed).
    models = [p["stages"][1]["config"]["model"] for p in manifest["spec"]["pipelines"]]
    assert models[0] == "digits_cnn"
    assert models[1]["onnx"] == "artifact:digits_cnn_onnx"
    assert models[2]["torch_export"] == "artifact:digits_cnn_pt2"
    assert [(m["pipeline"], m["runtime"], m["execution_provider"]) for m in manifest["models"]] == [
        ("onnx", "onnxruntime", "CPUExecutionProvider"),
        ("torch_export", "torch", None),
    ]
    assert manifest["environment"]["packages"]["onnxruntime"] is not None
    db = duckdb.connect(str(home / "results.duckdb"), read_only=True)
    rows = db.execute(
        "SELECT pipeline, graded, correct FROM accuracy WHERE run_id = ? ORDER BY pipeline",
        [run_dir.name],
    ).fetchall()
    db.close()
    per_pass = {
        name: json.loads(next((home / "artifacts" / name).glob("*/metadata.json")).read_text())[
            "test_correct"
        ]
        for name in ("digits_cnn", "digits_cnn_onnx", "digits_cnn_pt2")
    }
    assert len(set(per_pass.values())) == 1  # each file graded by its own runtime at build
    expected = (360 * PASSES, per_pass["digits_cnn"] * PASSES)
    assert {pipeline: (graded, correct) for pipeline, graded, correct in rows} == {
        name: expected for name in PIPELINES
    }

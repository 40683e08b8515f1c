"""A model checked against the image batches it gets, before the run: at validation, one
`path: message` line and exit 2 for wrong channels, a wrong image size, or an output width that
is not the dataset's classes nor its `labels`'; in `prepare`, the same for what the file does
not declare (a TorchScript module); and `labels` applied, so a model whose outputs come in
another order grades as the original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from stages.artifacts.registry import ensure_artifact
from stages.artifacts.vision_artifacts import build_digits_cnn, load_digits_cnn
from stages.cli.app import app
from stages.contracts.image_batches import ImageBatch
from stages.library.models.common import ModelFileError
from stages.library.vision.datasets import DigitsDatasetStage
from stages.library.vision.torchvision_stages import ClassifyStage
from stages.runtime.query import Query
from stages.runtime.stage import Stage, StageContext

DIGITS = ImageBatch(1, 8, 8, "float32", 10)
SPEC = """\
name: fit
pipelines:
  - name: p
    loadgen: {{type: closed_loop, concurrency: 1, duration_s: 1}}
    stages:
      - {{id: data, type: dataset.digits, outputs: [prep]}}
      - {{id: prep, type: torchvision.preprocess, outputs: [model], config: {prep}}}
      - {{id: model, type: torchvision.classify, config: {{model: {model}}}}}
"""
WHERE = "pipelines[0].stages[2].config"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with digits and the trained digits_cnn, built once for the module."""
    home = tmp_path_factory.mktemp("fit-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLLOBENCH_HOME", str(home))
        ensure_artifact("digits_cnn")
    return home


@pytest.fixture(autouse=True)
def _home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_HOME", str(home))


def _twelve_class_files(folder: Path) -> None:
    """A digits-shaped CNN with 12 outputs as ONNX (fixed 8x8 input), `.pt2` and TorchScript."""
    torch.manual_seed(0)
    model = build_digits_cnn(num_classes=12).eval()
    x = torch.zeros((1, 1, 8, 8))
    torch.onnx.export(model, (x,), str(folder / "m12.onnx"), input_names=["x"])
    torch.export.save(torch.export.export(model, (x,)), str(folder / "m12.pt2"))
    torch.jit.trace(model, x).save(str(folder / "m12.ts"))


def _validate(folder: Path, model: str, prep: str = "{mean: [0.5], std: [0.5]}") -> list[str]:
    path = folder / "spec.yaml"
    path.write_text(SPEC.format(model=model, prep=prep))
    result = CliRunner().invoke(app, ["validate", str(path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    if result.exit_code == 0:
        return []
    assert result.exit_code == 2, result.output
    return [line.removeprefix(f"{path}: ") for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["onnx", "torch_export"])
def test_validation_reads_the_files_outputs_and_input_size(tmp_path: Path, key: str) -> None:
    _twelve_class_files(tmp_path)
    name = {"onnx": "m12.onnx", "torch_export": "m12.pt2"}[key]
    assert _validate(tmp_path, f"{{{key}: {name}}}") == [
        f"{WHERE}.model: the model has 12 outputs but the dataset has 10 classes: map outputs "
        "to dataset labels with `labels` (an entry's), or give a model with 10 outputs"
    ]
    twelve = [*range(10), 0, 1]
    assert _validate(tmp_path, f"{{{key}: {name}, labels: {twelve}}}") == []
    assert _validate(tmp_path, f"{{{key}: {name}, labels: {twelve[:11]}}}") == [
        f"{WHERE}.model.labels: 11 labels for a model with 12 outputs: give one dataset label "
        "per output"
    ]
    assert _validate(tmp_path, f"{{{key}: {name}, labels: {[*twelve[:11], 10]}}}") == [
        f"{WHERE}.model.labels: labels [10] are not among the dataset's 10 classes"
    ]
    resized = _validate(
        tmp_path, f"{{{key}: {name}, labels: {twelve}}}", "{size: 16, mean: [0.5], std: [0.5]}"
    )
    assert resized == [
        f"{WHERE}.model: the model takes 8x8 images; the stage before gives float32 [1, 16, 16] "
        "images, 10 classes (resize with preprocess `size`)"
    ]


def test_built_in_models_are_checked_too(tmp_path: Path) -> None:
    """The case that reported accuracy 0 without a word: a 1000-class torchvision model on
    10-class data (and here, 3-channel on 1-channel)."""
    lines = _validate(tmp_path, "resnet18")
    assert (
        f"{WHERE}.model: the model takes 3-channel images; the stage before gives float32 "
        "[1, 8, 8] images, 10 classes" in lines
    )
    assert any(
        "the model has 1000 outputs but the dataset has 10 classes" in line for line in lines
    )
    assert _validate(tmp_path, "digits_cnn", prep="{}") == [
        "pipelines[0].stages[1].config.mean: 3 values for 1-channel images (the stage before "
        "gives float32 [1, 8, 8] images, 10 classes)"
    ]


@pytest.mark.slow
def test_a_labels_file_is_read_into_the_spec_and_a_bad_one_refused(tmp_path: Path) -> None:
    _twelve_class_files(tmp_path)
    (tmp_path / "labels.json").write_text(json.dumps([*range(10), 0, 1]))
    (tmp_path / "labels.txt").write_text("\n".join(str(n) for n in [*range(10), 0, 1]) + "\n")
    (tmp_path / "bad.txt").write_text("three\n")
    for name in ("labels.json", "labels.txt"):
        assert _validate(tmp_path, f"{{onnx: m12.onnx, labels: {name}}}") == []
    (line,) = _validate(tmp_path, "{onnx: m12.onnx, labels: bad.txt}")
    assert line.startswith(f"{WHERE}.model.labels: {tmp_path / 'bad.txt'}: not a JSON list")
    (line,) = _validate(tmp_path, "{onnx: m12.onnx, labels: /etc/hostname}")
    assert line.startswith(f"{WHERE}.model.labels: /etc/hostname is outside the model roots")


def _classify(config: dict[str, Any], images_in: ImageBatch | None = DIGITS) -> ClassifyStage:
    stage = ClassifyStage(
        ClassifyStage.config_model.model_validate(config),
        StageContext(stage_id="model", images_in=images_in),
    )
    stage.prepare()
    return stage


@pytest.mark.slow
def test_prepare_finds_what_the_file_does_not_declare(tmp_path: Path) -> None:
    """A TorchScript module says nothing before it runs: validation passes, and prepare's one
    call on a batch like the dataset's finds the 12 outputs, or the input it cannot take."""
    _twelve_class_files(tmp_path)
    assert _validate(tmp_path, "{torchscript: m12.ts}") == []
    entry = {"torchscript": str(tmp_path / "m12.ts")}
    with pytest.raises(ModelFileError) as raised:
        _classify({"model": entry})
    assert str(raised.value) == (
        f"{tmp_path / 'm12.ts'}: the model has 12 outputs but the dataset has 10 classes: map "
        "outputs to dataset labels with `labels` (an entry's), or give a model with 10 outputs"
    )
    with pytest.raises(ModelFileError, match=r"cannot take float32 \[3, 8, 8\] images: ") as raised:
        _classify({"model": entry}, ImageBatch(3, 8, 8, "float32", 10))
    assert "\n" not in str(raised.value)
    _classify({"model": entry}, images_in=None)  # nothing known: nothing refused


def _graded(stage: Stage[Any]) -> int:
    data = DigitsDatasetStage(
        DigitsDatasetStage.config_model.model_validate({"batch_size": 40, "shuffle": False}),
        StageContext(stage_id="data"),
    )
    data.prepare()
    correct = 0
    for index in range(9):
        query = Query(index, 0, stage_count=1)
        data.run(query)
        stage.run(query)
        correct += query.correct or 0
    return correct


class _Reversed(torch.nn.Module):
    """The digits model with its outputs in reverse order (output i is class 9 - i)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).flip(1)


def test_labels_map_outputs_to_dataset_labels(tmp_path: Path) -> None:
    """The trained model with its outputs reversed grades as the original once `labels` says
    so, and grades near zero without it (the silent failure the checks exist for)."""
    trained = load_digits_cnn(ensure_artifact("digits_cnn")).eval()
    torch.jit.trace(_Reversed(trained), torch.zeros((1, 1, 8, 8))).save(str(tmp_path / "r.ts"))
    expected = ensure_artifact("digits_cnn").metadata["test_correct"]
    mapped = {"torchscript": str(tmp_path / "r.ts"), "labels": list(range(9, -1, -1))}
    assert _graded(_classify({"model": mapped})) == expected
    assert _graded(_classify({"model": {"torchscript": str(tmp_path / "r.ts")}})) < expected / 5

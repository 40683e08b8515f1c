"""Vision stages on small inputs: dataset order and batches, preprocessing, graded
classification, training steps with their loss, the CUDA synchronise order, and one-line
validation errors for bad configs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from stages.artifacts.registry import ensure_artifact
from stages.cli.app import app
from stages.library.vision import torchvision_stages as vision_stages
from stages.library.vision.datasets import (
    DIGITS_SPLIT_SIZES,
    DigitsDatasetStage,
    FakeImagesDatasetStage,
)
from stages.library.vision.torchvision_stages import ClassifyStage, PreprocessStage, TrainStage
from stages.runtime.query import Query
from stages.runtime.registry import default_registry
from stages.runtime.stage import Stage, StageContext
from tests.helpers import REPO

SMALL_FAKE = {"size": 12, "image_size": 16, "num_classes": 4}


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home with digits and digits_cnn built once for the whole module."""
    home = tmp_path_factory.mktemp("vision-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLLOBENCH_HOME", str(home))
        ensure_artifact("digits_cnn")
    return home


@pytest.fixture(autouse=True)
def _use_shared_home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_HOME", str(shared_home))


def make(stage_class: type[Stage], config: dict[str, Any], seed: int = 7) -> Any:
    stage = stage_class(
        stage_class.config_model.model_validate(config),
        StageContext(stage_id="s", stage_index=0, seed=seed),
    )
    stage.prepare()
    return stage


def query_with(payload: Any = None, query_id: int = 0) -> Query:
    return Query(query_id, 0, payload=payload, stage_count=1)


def served(stage: Stage, count: int) -> list[dict[str, Any]]:
    payloads = []
    for index in range(count):
        query = query_with(query_id=index)
        assert stage.run(query) is None
        payloads.append(query.payload)
    return payloads


# --------------------------------------------------------------------------- registry


@pytest.mark.spawns
def test_vision_types_are_registered_without_importing_torch() -> None:
    code = (
        "import sys; from stages.runtime.registry import default_registry; "
        "r = default_registry(); "
        "names = ['dataset.digits', 'dataset.fake_images', 'torchvision.preprocess', "
        "'torchvision.classify', 'torchvision.train']; "
        "assert all(n in r for n in names), r.names(); "
        "assert 'torch' not in sys.modules and 'torchvision' not in sys.modules; print('ok')"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert completed.stdout.strip() == "ok", completed.stderr[-2000:]
    assert default_registry().get("torchvision.classify") is ClassifyStage


# --------------------------------------------------------------------------- datasets


def test_digits_batches_cycle_through_a_seeded_permutation() -> None:
    size = DIGITS_SPLIT_SIZES["test"]
    stage = make(DigitsDatasetStage, {"split": "test", "batch_size": 8})
    payloads = served(stage, size // 8 * 2)
    first = payloads[0]
    assert first["images"].shape == (8, 1, 8, 8) and first["images"].dtype == torch.float32
    assert first["labels"].shape == (8,) and first["labels"].dtype == torch.int64
    # One pass serves every test image once (360 = 45 batches of 8), in a shuffled order.
    fresh = make(DigitsDatasetStage, {"split": "test", "batch_size": 8})
    indices = torch.cat([fresh.next_indices() for _ in range(size // 8)])
    assert torch.equal(indices.sort().values, torch.arange(size))
    assert not torch.equal(indices, torch.arange(size))
    one_pass = torch.cat([p["images"] for p in payloads[: size // 8]]).reshape(size, -1)
    assert torch.equal(one_pass, fresh._images[indices].reshape(size, -1))
    # The same seed serves the same order; another seed offset another one.
    again = served(make(DigitsDatasetStage, {"split": "test", "batch_size": 8}), 3)
    other = served(make(DigitsDatasetStage, {"batch_size": 8, "seed_offset": 1}), 3)
    assert all(torch.equal(a["labels"], b["labels"]) for a, b in zip(payloads, again, strict=False))
    assert not all(
        torch.equal(a["images"], b["images"]) for a, b in zip(payloads, other, strict=False)
    )
    # The second pass is a new permutation, not the first one again.
    second_pass = torch.cat([p["images"] for p in payloads[size // 8 :]]).reshape(size, -1)
    assert not torch.equal(one_pass, second_pass)


def test_batches_run_across_the_end_of_a_pass() -> None:
    stage = make(DigitsDatasetStage, {"split": "test", "batch_size": 7, "shuffle": False})
    payloads = served(stage, 52)  # 52 * 7 = 364: the last batch wraps past image 359
    labels = torch.cat([p["labels"] for p in payloads])
    assert torch.equal(labels[:360], stage._labels)
    assert torch.equal(labels[360:], stage._labels[:4])


def test_fake_images_are_uint8_batches() -> None:
    stage = make(FakeImagesDatasetStage, {**SMALL_FAKE, "batch_size": 5})
    [payload] = served(stage, 1)
    assert payload["images"].shape == (5, 3, 16, 16) and payload["images"].dtype == torch.uint8
    assert int(payload["labels"].max()) < 4


# --------------------------------------------------------------------------- preprocess


def test_preprocess_scales_resizes_normalises_and_leaves_the_input_alone() -> None:
    images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    upstream = {"images": images, "labels": torch.tensor([1, 2])}
    stage = make(PreprocessStage, {"size": 8, "mean": [0.5], "std": [0.25]})
    query = query_with(upstream)
    stage.run(query)
    out = query.payload["images"]
    assert out.shape == (2, 3, 8, 8) and out.dtype == torch.float32
    assert torch.allclose(out, torch.full_like(out, 2.0))  # (1.0 - 0.5) / 0.25
    assert query.payload["labels"] is upstream["labels"]
    assert query.payload is not upstream and upstream["images"] is images
    assert images.dtype == torch.uint8 and int(images[0, 0, 0, 0]) == 255


def test_preprocess_float_input_is_not_modified_in_place() -> None:
    images = torch.ones((1, 1, 8, 8))
    stage = make(PreprocessStage, {"mean": [0.5], "std": [0.5]})
    query = query_with({"images": images})
    stage.run(query)
    assert torch.equal(images, torch.ones((1, 1, 8, 8)))
    assert torch.allclose(query.payload["images"], torch.ones((1, 1, 8, 8)))


def test_preprocess_channel_mismatch_is_a_clear_error() -> None:
    stage = make(PreprocessStage, {})  # ImageNet's three values
    with pytest.raises(ValueError, match="3 values but the images have 1 channels"):
        stage.run(query_with({"images": torch.zeros((1, 1, 8, 8))}))


# --------------------------------------------------------------------------- classify


def test_classify_grades_batches_and_reaches_the_accuracy_floor() -> None:
    data = make(DigitsDatasetStage, {"split": "test", "batch_size": 40, "shuffle": False})
    classify = make(ClassifyStage, {"model": "digits_cnn", "threads": 1})
    graded = correct = 0
    for index in range(9):  # 9 * 40 = the 360 test images
        query = query_with(query_id=index)
        data.run(query)
        labels = query.payload["labels"]
        assert classify.run(query) is None
        assert query.graded == 40 and query.correct is not None and 0 <= query.correct <= 40
        assert torch.equal(query.payload["labels"], labels)
        assert query.payload["predictions"].shape == (40,)
        graded += query.graded
        correct += query.correct
    assert graded == 360
    built = ensure_artifact("digits_cnn")
    assert correct == built.metadata["test_correct"]  # the artefact's own accuracy
    assert correct / graded >= 0.95
    assert ClassifyStage.records_outcome and TrainStage.records_outcome


def test_classify_without_labels_grades_nothing() -> None:
    classify = make(ClassifyStage, {"model": "digits_cnn"})
    query = query_with(torch.zeros((3, 1, 8, 8)))
    classify.run(query)
    assert query.graded is None and query.correct is None
    assert query.payload["predictions"].shape == (3,)


def test_classify_torchvision_model_on_small_images() -> None:
    classify = make(ClassifyStage, {"model": "resnet18", "num_classes": 4, "threads": 1})
    query = query_with({"images": torch.zeros((2, 3, 32, 32)), "labels": torch.tensor([0, 1])})
    classify.run(query)
    assert query.graded == 2 and query.correct in (0, 1, 2)
    assert int(query.payload["predictions"].max()) < 4


# --------------------------------------------------------------------------- train


def test_train_takes_one_step_per_query_and_reports_its_loss() -> None:
    data = make(DigitsDatasetStage, {"split": "train", "batch_size": 64})
    train = make(
        TrainStage,
        {"model": "digits_cnn", "weights": "random", "optimizer": "adamw", "lr": 0.005},
    )
    before = [p.detach().clone() for p in train._model.parameters()]
    losses = []
    for index in range(30):
        query = query_with(query_id=index)
        data.run(query)
        assert train.run(query) is None
        assert isinstance(query.loss, float)
        assert query.payload == {"loss": query.loss}
        losses.append(query.loss)
    after = list(train._model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # it learns
    assert losses[0] > 1.5  # random init: about ln(10)


def test_train_from_preprocessed_fake_images_with_sgd() -> None:
    data = make(FakeImagesDatasetStage, {**SMALL_FAKE, "batch_size": 4})
    prep = make(PreprocessStage, {})
    train = make(TrainStage, {"model": "resnet18", "num_classes": 4, "threads": 1})
    query = query_with()
    data.run(query)
    prep.run(query)
    train.run(query)
    assert query.loss is not None and query.loss > 0


def test_train_needs_labels() -> None:
    train = make(TrainStage, {"model": "digits_cnn", "weights": "random"})
    with pytest.raises(ValueError, match="needs labels"):
        train.run(query_with(torch.zeros((1, 1, 8, 8))))


# --------------------------------------------------------------------------- synchronise


class _Recorded(torch.nn.Module):
    """Wraps a model and notes each forward call in `calls`."""

    def __init__(self, inner: torch.nn.Module, calls: list[str]) -> None:
        super().__init__()
        self.inner = inner
        self.calls = calls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append("model")
        return self.inner(x)


@pytest.mark.parametrize("stage_class", [ClassifyStage, TrainStage, PreprocessStage])
def test_cuda_synchronise_follows_the_model_call_before_run_returns(
    stage_class: type[Stage], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA a stage's finished_ns must come after the device finished: the synchroniser
    runs after the model call and before `run` returns (CPU here; the synchroniser is a fake
    that records when it is called, as `device_synchronizer` would hand back for cuda)."""
    calls: list[str] = []
    devices: list[str] = []

    def fake_synchronizer(device: str, torch_module: Any = None) -> Any:
        devices.append(device)
        return lambda: calls.append("synchronize")

    monkeypatch.setattr(vision_stages, "device_synchronizer", fake_synchronizer)
    config: dict[str, Any] = {} if stage_class is PreprocessStage else {"model": "digits_cnn"}
    if stage_class is PreprocessStage:
        config = {"mean": [0.0], "std": [1.0]}
    stage = make(stage_class, config)
    assert devices == ["cpu"]  # asked for the pipeline's device
    # classify runs its model once in prepare and waits for the device, so first-call set-up
    # (cuDNN/cuBLAS handles, kernel loading) happens before the barrier, not in a timed query
    assert calls == (["synchronize"] if stage_class is ClassifyStage else [])
    calls.clear()
    if hasattr(stage, "_model"):
        stage._model = _Recorded(stage._model, calls)
    query = query_with({"images": torch.zeros((2, 1, 8, 8)), "labels": torch.tensor([1, 2])})
    stage.run(query)
    calls.append("returned")
    expected = ["synchronize", "returned"]
    assert calls == (expected if stage_class is PreprocessStage else ["model", *expected])


# --------------------------------------------------------------------------- validation

SPEC = """
name: v
pipelines:
  - name: p
    loadgen: {{type: server, rate: 10, duration_s: 1}}
    stages:
      - {{id: data, type: {data_type}, config: {data_config}, outputs: [model]}}
      - {{id: model, type: {model_type}, config: {model_config}}}
"""


def spec_text(
    data_config: str = "{}",
    model_config: str = "{model: digits_cnn}",
    data_type: str = "dataset.digits",
    model_type: str = "torchvision.classify",
) -> str:
    return SPEC.format(
        data_type=data_type, data_config=data_config, model_type=model_type,
        model_config=model_config,
    )  # fmt: skip


BAD_CONFIGS = [
    (
        "batch larger than the split",
        spec_text(data_config="{split: test, batch_size: 361}"),
        "pipelines[0].stages[0].config: batch_size 361 is larger than the digits test split "
        "(360 images)",
    ),
    (
        "batch larger than fake images",
        spec_text(data_type="dataset.fake_images", data_config="{size: 4, batch_size: 5}"),
        "pipelines[0].stages[0].config: batch_size 5 is larger than the dataset (size 4)",
    ),
    (
        "unknown torchvision model",
        spec_text(model_config="{model: resnet81}"),
        "pipelines[0].stages[1].config.model: unknown torchvision model 'resnet81'; did you "
        "mean resnet18",
    ),
    (
        "digits_cnn classes",
        spec_text(model_config="{model: digits_cnn, num_classes: 5}"),
        "pipelines[0].stages[1].config: digits_cnn has 10 classes",
    ),
    (
        "bad optimizer",
        spec_text(model_type="torchvision.train", model_config="{optimizer: adam}"),
        "pipelines[0].stages[1].config.optimizer: Input should be 'sgd' or 'adamw'",
    ),
    (
        "mean and std lengths",
        spec_text(model_type="torchvision.preprocess", model_config="{mean: [0.5], std: [1, 1]}"),
        "pipelines[0].stages[1].config: mean has 1 values and std 2",
    ),
    (
        "unknown key",
        spec_text(model_config="{model: digits_cnn, batch: 4}"),
        "pipelines[0].stages[1].config.batch: unknown key 'batch'",
    ),
]


@pytest.mark.parametrize(
    ("label", "text", "expected"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_configs_give_one_line_and_exit_2(
    tmp_path: Path, label: str, text: str, expected: str
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{path}: {expected}"), lines[0]


def test_good_config_validates(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(data_config="{split: test, batch_size: 360}"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_classify_prepare_runs_the_model_once_before_the_barrier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    examples: list[Any] = []
    original = ClassifyStage._example_input

    def counted(self: ClassifyStage, model: Any) -> Any:
        examples.append(original(self, model))
        return examples[-1]

    monkeypatch.setattr(ClassifyStage, "_example_input", counted)
    stage = make(ClassifyStage, {"model": "digits_cnn"})
    assert len(examples) == 1 and tuple(examples[0].shape) == (1, 1, 8, 8)
    query = query_with({"images": torch.zeros((1, 1, 8, 8)), "labels": torch.tensor([0])})
    stage.run(query)
    assert len(examples) == 1  # run never builds an example input


# --------------------------------------------------------------------------- model entries


@pytest.mark.slow
def test_a_brought_model_grades_as_the_built_in_one_in_every_format(tmp_path: Path) -> None:
    """The trained digits_cnn saved as TorchScript, a torch.export program and ONNX, each run
    by `torchvision.classify` from a model entry: the same 360 answers and the artefact's own
    accuracy (ONNX through ONNX Runtime)."""
    from stages.artifacts.vision_artifacts import load_digits_cnn

    model = load_digits_cnn(ensure_artifact("digits_cnn")).eval()
    x = torch.zeros((40, 1, 8, 8))
    torch.jit.trace(model, x).save(str(tmp_path / "d.ts"))
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(tmp_path / "d.pt2"))
    torch.onnx.export(
        model, (x,), str(tmp_path / "d.onnx"), dynamic_axes={"x": {0: "batch"}}, input_names=["x"]
    )
    expected = ensure_artifact("digits_cnn").metadata["test_correct"]
    for entry in ({"torchscript": "d.ts"}, {"torch_export": "d.pt2"}, {"onnx": "d.onnx"}):
        ((key, name),) = entry.items()
        data = make(DigitsDatasetStage, {"split": "test", "batch_size": 40, "shuffle": False})
        classify = make(ClassifyStage, {"model": {key: str(tmp_path / name)}, "threads": 1})
        correct = 0
        for index in range(9):
            query = query_with(query_id=index)
            data.run(query)
            classify.run(query)
            correct += query.correct or 0
        assert correct == expected, key

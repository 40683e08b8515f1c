"""Vision artefacts: deterministic builds, the digits_cnn accuracy floor, torchvision names,
and the pretrained-weights path without a network (a fake download)."""

from __future__ import annotations

import socket
import time
import urllib.error
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from stages.artifacts import torchvision_models, vision_artifacts
from stages.artifacts.registry import ensure_artifact
from stages.artifacts.store import ArtifactError, ArtifactStore
from stages.library.vision.datasets import DIGITS_SPLIT_SIZES

SMALL_FAKE = {"size": 6, "image_size": 16, "num_classes": 5}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("digits", {}),
        ("fake_images", SMALL_FAKE),
        ("digits_cnn", {}),
        ("torchvision_model", {"name": "resnet18", "num_classes": 10}),
    ],
)
def test_builds_are_deterministic(tmp_path: Path, name: str, params: dict[str, Any]) -> None:
    first = ensure_artifact(name, params, store=ArtifactStore(tmp_path / "a"))
    second = ensure_artifact(name, params, store=ArtifactStore(tmp_path / "b"))
    assert first.content_hash == second.content_hash
    assert first.metadata["kind"] in ("dataset", "model")


def test_seed_changes_the_content(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    one = ensure_artifact("fake_images", {**SMALL_FAKE, "seed": 0}, store=store)
    other = ensure_artifact("fake_images", {**SMALL_FAKE, "seed": 1}, store=store)
    assert one.content_hash != other.content_hash


def test_digits_splits_match_the_stage_constants(tmp_path: Path) -> None:
    built = ensure_artifact("digits", store=ArtifactStore(tmp_path))
    assert built.metadata["sizes"] == DIGITS_SPLIT_SIZES
    assert built.metadata["source"] == "sklearn.datasets.load_digits"
    for split, size in DIGITS_SPLIT_SIZES.items():
        images, labels = vision_artifacts.load_digits_split(built, split)
        assert images.shape == (size, 1, 8, 8) and images.dtype == np.float32
        assert labels.shape == (size,) and labels.dtype == np.int64
        assert images.min() >= 0.0 and images.max() <= 1.0
        assert set(labels.tolist()) == set(range(10))  # stratified: every class in each split
    assert sum(DIGITS_SPLIT_SIZES.values()) == 1797  # the two splits are the whole dataset


def test_fake_images_shape_and_labels(tmp_path: Path) -> None:
    built = ensure_artifact("fake_images", SMALL_FAKE, store=ArtifactStore(tmp_path))
    images, labels = vision_artifacts.load_fake_images(built)
    assert images.shape == (6, 3, 16, 16) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and labels.max() < 5
    assert "torch.Generator" in built.metadata["source"]


@pytest.mark.slow
def test_digits_cnn_meets_the_accuracy_floor_recomputed_from_its_weights(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    began = time.monotonic()
    built = ensure_artifact("digits_cnn", store=store)
    assert time.monotonic() - began < 30  # "a few seconds" on a quiet machine; lenient here
    assert built.metadata["accuracy"] >= 0.95
    assert built.metadata["training"]["threads"] == 1
    assert (built.path / "model.safetensors").exists()
    model = vision_artifacts.load_digits_cnn(built)
    images, labels = vision_artifacts.load_digits_split(
        ensure_artifact("digits", store=store), "test"
    )
    correct = vision_artifacts.top1_correct(
        model, torch.from_numpy(images), torch.from_numpy(labels)
    )
    assert correct == built.metadata["test_correct"]
    assert correct / len(labels) >= 0.95


def test_digits_cnn_below_the_floor_fails_the_build(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="below the floor"):
        ensure_artifact("digits_cnn", {"epochs": 1, "lr": 1e-6}, store=ArtifactStore(tmp_path))


def test_unknown_torchvision_name_lists_close_matches(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError) as raised:
        ensure_artifact("torchvision_model", {"name": "resnet81"}, store=ArtifactStore(tmp_path))
    message = str(raised.value)
    assert "unknown torchvision model 'resnet81'" in message and "resnet18" in message
    assert "\n" not in message


def test_random_weights_load_back(tmp_path: Path) -> None:
    built = ensure_artifact(
        "torchvision_model", {"name": "resnet18", "num_classes": 10}, store=ArtifactStore(tmp_path)
    )
    model = torchvision_models.load_torchvision_model(built)
    assert model.fc.out_features == 10
    torch.manual_seed(0)  # the recipe's seed: the same init as the build
    from torchvision import models

    fresh = models.get_model("resnet18", weights=None, num_classes=10)
    assert torch.equal(fresh.conv1.weight, model.conv1.weight)


def _fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    hub = tmp_path / "hub"
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(hub))
    return hub / "checkpoints"


def test_pretrained_without_network_fails_fast_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_hub(monkeypatch, tmp_path)
    timeouts: list[float | None] = []

    def no_network(url: str, path: str, progress: bool = True) -> None:
        timeouts.append(socket.getdefaulttimeout())
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    began = time.monotonic()
    with pytest.raises(ArtifactError) as raised:
        ensure_artifact(
            "torchvision_model",
            {"name": "resnet18", "weights": "pretrained"},
            store=ArtifactStore(tmp_path / "store"),
        )
    assert time.monotonic() - began < 10
    message = str(raised.value)
    assert "\n" not in message
    assert "not in the torch hub cache" in message and "weights: random" in message
    assert "resnet18-f37072fd.pth" in message
    # The download ran under a short socket timeout, restored afterwards.
    assert timeouts == [torchvision_models.PRETRAINED_DOWNLOAD_TIMEOUT_S]
    assert socket.getdefaulttimeout() is None


def test_pretrained_reads_the_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoints = _fake_hub(monkeypatch, tmp_path)
    checkpoints.mkdir(parents=True)
    from torchvision import models

    torch.manual_seed(123)
    cached = models.get_model("resnet18", weights=None).state_dict()
    torch.save(cached, checkpoints / "resnet18-f37072fd.pth")

    def must_not_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached file should be used")

    monkeypatch.setattr(torchvision_models, "download_weights", must_not_download)
    built = ensure_artifact(
        "torchvision_model",
        {"name": "resnet18", "weights": "pretrained"},
        store=ArtifactStore(tmp_path / "store"),
    )
    assert built.metadata["source"].startswith("torch hub cache")
    assert built.metadata["accuracy"] == pytest.approx(0.69758)
    model = torchvision_models.load_torchvision_model(built)
    assert torch.equal(model.conv1.weight, cached["conv1.weight"])


def test_pretrained_needs_1000_classes(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="1000 classes"):
        ensure_artifact(
            "torchvision_model",
            {"name": "resnet18", "weights": "pretrained", "num_classes": 10},
            store=ArtifactStore(tmp_path),
        )

"""Vision artefacts: the `digits` and `fake_images` datasets and the `digits_cnn` model.

Every builder is deterministic for its recipe (seeded, one thread, `.npy` or safetensors files
with no timestamps), so two builds give one content hash. torch and scikit-learn are imported
inside the functions that need them, never at import time. Torchvision classifiers are in
`torchvision_models`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from stages.artifacts.store import (
    ArtifactBuilder,
    ArtifactError,
    ArtifactParams,
    BuiltArtifact,
    single_thread_torch,
)

DIGITS_SOURCE = "sklearn.datasets.load_digits"
DIGITS_CLASSES = 10
DIGITS_CNN_ACCURACY_FLOOR = 0.95


# --------------------------------------------------------------------------- datasets


class DigitsParams(ArtifactParams):
    test_fraction: float = Field(
        0.2, gt=0, lt=1, description="Share of the 1797 images in the test split (stratified)."
    )
    seed: int = Field(0, description="Seed of the stratified train/test split.")


class DigitsBuilder(ArtifactBuilder[DigitsParams]):
    """scikit-learn's bundled handwritten digits (real data, 1797 8x8 images, 10 classes),
    split into train and test (stratified, seeded); `<split>_images.npy` float32 [N,1,8,8] in
    [0,1] and `<split>_labels.npy` int64 [N]."""

    name = "digits"
    version = "1"
    kind = "dataset"
    description = "scikit-learn's 8x8 handwritten digits, stratified train/test split"

    def build(
        self, params: DigitsParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import numpy as np
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        bunch = load_digits()
        images = (np.asarray(bunch.images, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
        labels = np.asarray(bunch.target, dtype=np.int64)
        train_x, test_x, train_y, test_y = train_test_split(
            images,
            labels,
            test_size=params.test_fraction,
            random_state=params.seed,
            stratify=labels,
        )
        sizes = {}
        for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
            np.save(out_dir / f"{split}_images.npy", np.ascontiguousarray(x))
            np.save(out_dir / f"{split}_labels.npy", np.ascontiguousarray(y))
            sizes[split] = len(y)
        return {
            "source": DIGITS_SOURCE,
            "shape": [1, 8, 8],
            "dtype": "float32",
            "value_range": [0.0, 1.0],
            "sizes": sizes,
            "classes": DIGITS_CLASSES,
            "seed": params.seed,
        }


class FakeImagesParams(ArtifactParams):
    size: int = Field(256, ge=1, le=100_000, description="Number of images.")
    image_size: int = Field(224, ge=1, le=1024, description="Height and width in pixels.")
    channels: int = Field(3, ge=1, le=4, description="Colour channels.")
    num_classes: int = Field(1000, ge=1, description="Labels are drawn from 0..num_classes-1.")
    seed: int = Field(0, description="Seed of the pixel and label generator.")


class FakeImagesBuilder(ArtifactBuilder[FakeImagesParams]):
    """Random images, torchvision `FakeData`'s role without its per-index seeding: one seeded
    `torch.Generator` draws uniform uint8 pixels [N,C,H,W] and labels, in that order."""

    name = "fake_images"
    version = "1"
    kind = "dataset"
    description = "seeded random uint8 images and labels (FakeData-equivalent)"

    def build(
        self, params: FakeImagesParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import numpy as np
        import torch

        generator = torch.Generator().manual_seed(params.seed)
        shape = (params.size, params.channels, params.image_size, params.image_size)
        images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        labels = torch.randint(0, params.num_classes, (params.size,), generator=generator)
        np.save(out_dir / "images.npy", images.numpy())
        np.save(out_dir / "labels.npy", labels.numpy().astype(np.int64))
        return {
            "source": "torch.Generator uniform uint8 pixels, then labels (FakeData-equivalent)",
            "shape": list(shape[1:]),
            "dtype": "uint8",
            "sizes": {"all": params.size},
            "classes": params.num_classes,
            "seed": params.seed,
        }


def load_digits_split(built: BuiltArtifact, split: str) -> tuple[Any, Any]:
    """(images, labels) numpy arrays of one split of a built `digits` artefact."""
    import numpy as np

    return (
        np.load(built.path / f"{split}_images.npy"),
        np.load(built.path / f"{split}_labels.npy"),
    )


def load_fake_images(built: BuiltArtifact) -> tuple[Any, Any]:
    """(images, labels) numpy arrays of a built `fake_images` artefact."""
    import numpy as np

    return np.load(built.path / "images.npy"), np.load(built.path / "labels.npy")


# --------------------------------------------------------------------------- digits_cnn


def build_digits_cnn(num_classes: int = DIGITS_CLASSES) -> Any:
    """The digits CNN (an `nn.Module`, random init from torch's current seed): two 3x3
    convolutions (16, 32 channels), a 2x2 max-pool, then 512 -> 64 -> classes. ~40k params."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


class DigitsCnnParams(ArtifactParams):
    seed: int = Field(0, description="Seed of the initial weights and the batch order.")
    epochs: int = Field(20, ge=1, le=1000, description="Passes over the train split.")
    batch_size: int = Field(64, ge=1, le=1437, description="Training minibatch size.")
    lr: float = Field(0.003, gt=0, description="AdamW learning rate.")
    digits_seed: int = Field(0, description="Seed of the digits train/test split trained on.")


def top1_correct(model: Any, images: Any, labels: Any) -> int:
    """Samples of `images` whose top-1 prediction equals the label (eval mode, no grad)."""
    import torch

    model.eval()
    with torch.inference_mode():
        return int((model(images).argmax(1) == labels).sum())


class DigitsCnnBuilder(ArtifactBuilder[DigitsCnnParams]):
    """A small CNN really trained on the `digits` train split (AdamW, one thread, seeded):
    `model.safetensors`; metadata records the test accuracy (the build fails below 95%)."""

    name = "digits_cnn"
    version = "1"
    kind = "model"
    description = "small CNN trained on digits (test accuracy >= 0.95)"

    def dependencies(self, params: DigitsCnnParams) -> list[tuple[str, dict[str, Any]]]:
        return [("digits", {"seed": params.digits_seed})]

    def build(
        self, params: DigitsCnnParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        import torch
        from safetensors.torch import save_file

        digits = inputs["digits"]
        train_x, train_y = (torch.from_numpy(a) for a in load_digits_split(digits, "train"))
        test_x, test_y = (torch.from_numpy(a) for a in load_digits_split(digits, "test"))
        started = time.monotonic()
        with single_thread_torch(params.seed):
            model = build_digits_cnn()
            optimiser = torch.optim.AdamW(model.parameters(), lr=params.lr)
            order = torch.Generator().manual_seed(params.seed)
            loss = torch.zeros(())
            for _ in range(params.epochs):
                model.train()
                permutation = torch.randperm(len(train_y), generator=order)
                for start in range(0, len(train_y), params.batch_size):
                    batch = permutation[start : start + params.batch_size]
                    optimiser.zero_grad(set_to_none=True)
                    loss = torch.nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
                    loss.backward()
                    optimiser.step()
            correct = top1_correct(model, test_x, test_y)
            train_correct = top1_correct(model, train_x, train_y)
        accuracy = correct / len(test_y)
        if accuracy < DIGITS_CNN_ACCURACY_FLOOR:
            raise ArtifactError(
                f"artefact digits_cnn: test accuracy {accuracy:.4f} is below the floor "
                f"{DIGITS_CNN_ACCURACY_FLOOR}; change epochs or lr"
            )
        state = {key: value.contiguous() for key, value in model.state_dict().items()}
        save_file(state, str(out_dir / "model.safetensors"), metadata={"model": "digits_cnn"})
        return {
            "source": "trained here on the digits train split",
            "architecture": "conv3x3(16)-relu-conv3x3(32)-relu-maxpool2-fc(64)-relu-fc(10)",
            "parameters": sum(p.numel() for p in model.parameters()),
            "input_shape": [1, 8, 8],
            "classes": DIGITS_CLASSES,
            "accuracy": round(accuracy, 6),
            "test_correct": correct,
            "test_size": len(test_y),
            "train_accuracy": round(train_correct / len(train_y), 6),
            "final_train_loss": round(float(loss.detach()), 6),
            "training": {
                "optimizer": "AdamW",
                "lr": params.lr,
                "epochs": params.epochs,
                "batch_size": params.batch_size,
                "threads": 1,
                "seconds": round(time.monotonic() - started, 2),
            },
            "seed": params.seed,
        }


def load_digits_cnn(built: BuiltArtifact) -> Any:
    """The trained digits CNN of a built `digits_cnn` artefact (CPU, float32, eval mode)."""
    from safetensors.torch import load_file

    model = build_digits_cnn()
    model.load_state_dict(load_file(str(built.path / "model.safetensors")))
    return model.eval()


BUILDERS: tuple[ArtifactBuilder[Any], ...] = (
    DigitsBuilder(),
    FakeImagesBuilder(),
    DigitsCnnBuilder(),
)

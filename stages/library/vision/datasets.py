"""Dataset stages: serve batches of a built image dataset in a seeded, cycling order.

ONE QUERY = one batch of `batch_size` images with their labels, as the payload
`{"images": tensor [B,C,H,W], "labels": int64 tensor [B]}` (CPU tensors; the next stage moves
them to the pipeline's device). The order is a seeded permutation of the split, drawn again at
every pass (an epoch), and batches run on across the end of a pass, so the stage never runs out.

Batch size and the load generator's `samples`: the loadgen decides how many samples a query
carries (`query.samples`: 1, except `multi_stream`'s `samples_per_query` and a trace's
`samples`), and `throughput.samples_per_s` counts those. These stages never change it and
always serve `batch_size` images: to make samples/s count images, give the loadgen the same
number (`multi_stream` with `samples_per_query: batch_size`). Accuracy (`graded`) always counts
the images actually classified.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import Field, model_validator

from stages.artifacts.vision_artifacts import DIGITS_CLASSES, FakeImagesParams
from stages.contracts.image_batches import ImageBatch
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig

DIGITS_SPLIT_SIZES = {"train": 1437, "test": 360}
"""Images per split of the default `digits` artefact (test_fraction 0.2, seed 0); a test
checks them against the built metadata, so batch sizes are validated without building."""


class DatasetConfig(StageConfig):
    """Options every dataset stage has."""

    batch_size: int = Field(1, ge=1, description="Images per query (one query = one batch).")
    shuffle: bool = Field(
        True,
        description="Serve a seeded permutation of the dataset, a new one every pass; false: "
        "dataset order.",
    )
    seed_offset: int = Field(
        0,
        ge=0,
        description="Added to the pipeline's seed for the serving order, so two stages of one "
        "spec can draw different orders.",
    )


class DigitsConfig(DatasetConfig):
    split: Literal["train", "test"] = Field(
        "test", description="Which split of the digits dataset (1437 train, 360 test images)."
    )

    @model_validator(mode="after")
    def _batch_fits(self) -> DigitsConfig:
        size = DIGITS_SPLIT_SIZES[self.split]
        if self.batch_size > size:
            raise ValueError(
                f"batch_size {self.batch_size} is larger than the digits {self.split} split "
                f"({size} images)"
            )
        return self

    def images_out(self, images_in: ImageBatch | None) -> ImageBatch | None:
        return ImageBatch(1, 8, 8, "float32", DIGITS_CLASSES)


class FakeImagesConfig(DatasetConfig):
    size: int = Field(256, ge=1, le=100_000, description="Number of images in the dataset.")
    image_size: int = Field(224, ge=1, le=1024, description="Height and width in pixels.")
    num_classes: int = Field(1000, ge=1, description="Labels are drawn from 0..num_classes-1.")
    seed: int = Field(0, description="Seed of the dataset's pixels and labels (the artefact).")

    @model_validator(mode="after")
    def _batch_fits(self) -> FakeImagesConfig:
        if self.batch_size > self.size:
            raise ValueError(
                f"batch_size {self.batch_size} is larger than the dataset (size {self.size})"
            )
        return self

    def images_out(self, images_in: ImageBatch | None) -> ImageBatch | None:
        side = self.image_size
        channels = FakeImagesParams.model_fields["channels"].default  # the stage keeps it
        return ImageBatch(channels, side, side, "uint8", self.num_classes)


DatasetConfigT = TypeVar("DatasetConfigT", bound=DatasetConfig)


class _BatchServer(Stage[DatasetConfigT]):
    """Serves batches from in-memory tensors `self._images` and `self._labels`."""

    def _load(self) -> tuple[Any, Any]:
        """(images, labels) numpy arrays of the dataset."""
        raise NotImplementedError

    def prepare(self) -> None:
        import numpy as np
        import torch

        images, labels = self._load()
        self._images = torch.from_numpy(np.ascontiguousarray(images))
        self._labels = torch.from_numpy(np.ascontiguousarray(labels))
        self._count = len(self._labels)
        self._rng = np.random.default_rng([self.context.seed, self.config.seed_offset])
        self._order = self._new_pass()
        self._position = 0
        self._torch = torch

    def _new_pass(self) -> Any:
        import numpy as np
        import torch

        if self.config.shuffle:
            return torch.from_numpy(self._rng.permutation(self._count).astype(np.int64))
        return torch.arange(self._count, dtype=torch.int64)

    def next_indices(self) -> Any:
        """The dataset indices of the next batch (an int64 tensor), running on into a new pass
        at the end of the current one."""
        size = self.config.batch_size
        if self._position + size > len(self._order):
            rest = self._order[self._position :]
            self._order = self._torch.cat((rest, self._new_pass()))
            self._position = 0
        indices = self._order[self._position : self._position + size]
        self._position += size
        return indices

    def run(self, query: Query) -> Route:
        indices = self.next_indices()
        query.payload = {
            "images": self._images.index_select(0, indices),
            "labels": self._labels.index_select(0, indices),
        }
        return None


class DigitsDatasetStage(_BatchServer[DigitsConfig]):
    """scikit-learn's handwritten digits (artefact `digits`): one query = one batch of
    `batch_size` float32 images [B,1,8,8] in [0,1] and their labels."""

    def _load(self) -> tuple[Any, Any]:
        from stages.artifacts.registry import ensure_artifact
        from stages.artifacts.vision_artifacts import load_digits_split

        return load_digits_split(ensure_artifact("digits"), self.config.split)


class FakeImagesDatasetStage(_BatchServer[FakeImagesConfig]):
    """Seeded random images (artefact `fake_images`): one query = one batch of `batch_size`
    uint8 images [B,3,H,W] and labels (`torchvision.preprocess` makes them float)."""

    def _load(self) -> tuple[Any, Any]:
        from stages.artifacts.registry import ensure_artifact
        from stages.artifacts.vision_artifacts import load_fake_images

        params = {
            "size": self.config.size,
            "image_size": self.config.image_size,
            "num_classes": self.config.num_classes,
            "seed": self.config.seed,
        }
        return load_fake_images(ensure_artifact("fake_images", params))

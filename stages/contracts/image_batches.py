"""What an image payload holds, as the stages before a model declare it: the contract between
the stages that make image batches (datasets, preprocessing) and the model stages that check,
before the run, that a model fits them (`StageConfig.images_out` / `images_problems`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageBatch:
    """One image of a payload's `images` batch ([B, channels, height, width] of `dtype`), and
    how many classes its `labels` span (None: no labels travel with it)."""

    channels: int
    height: int
    width: int
    dtype: str
    classes: int | None

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return (self.channels, self.height, self.width)

    def describe_images(self) -> str:
        """E.g. `float32 [1, 8, 8] images`."""
        shape = ", ".join(str(size) for size in self.image_shape)
        return f"{self.dtype} [{shape}] images"

    def describe(self) -> str:
        """E.g. `float32 [1, 8, 8] images, 10 classes`, for a one-line problem."""
        classes = "no labels" if self.classes is None else f"{self.classes} classes"
        return f"{self.describe_images()}, {classes}"

"""Which classifier a vision model stage runs: `digits_cnn`, a torchvision architecture by
name, or a model entry (a file the user brings), with its weights and classes; how it loads;
and whether it fits the image batches the stages before it make (stages.library.models.fit).

torch and torchvision are imported in validators and loaders, never at import.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from stages.contracts.image_batches import ImageBatch
from stages.library.core.torch_common import ModelStageConfig
from stages.spec.model_entry import ModelEntry

DIGITS_CNN = "digits_cnn"


CLASSIFIER_FORMATS = frozenset(
    {"hf_folder", "onnx", "torch_export", "torchscript", "torchvision_weights"}
)
"""Model entry formats a classifier stage loads (stages.library.models.loaders)."""


class ModelChoiceConfig(ModelStageConfig):
    """Which classifier a model stage runs, and with which weights."""

    model_entry_fields: ClassVar[tuple[str, ...]] = ("model",)
    model: str | ModelEntry = Field(
        DIGITS_CNN,
        description="digits_cnn (the small CNN trained on digits), a torchvision classifier "
        "name (torchvision.models.list_models(module=torchvision.models)), e.g. resnet18, or "
        "a model entry: a file the user brings (`onnx`, `torch_export`, `torchscript`, "
        "`weights` with `arch`, or `path`: a Hugging Face image classifier folder; "
        "stages.spec.model_entry).",
    )
    weights: Literal["random", "pretrained"] | None = Field(
        None,
        description="random: seeded init; pretrained: digits_cnn's trained weights, or "
        "torchvision's DEFAULT weights from the torch hub cache. Default: pretrained for "
        "digits_cnn, random for torchvision models (no download).",
    )
    seed: int = Field(0, description="Seed of random weights (the model artefact's recipe).")
    num_classes: int | None = Field(
        None,
        ge=1,
        description="Classes of the final layer; default 10 for digits_cnn, 1000 otherwise.",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str | ModelEntry) -> str | ModelEntry:
        if isinstance(value, ModelEntry):
            if value.format not in CLASSIFIER_FORMATS:
                formats = ", ".join(sorted(CLASSIFIER_FORMATS))
                raise ValueError(f"a classifier loads {formats} entries, not {value.format}")
            if value.arch is not None:
                cls._known_model(value.arch)
            return value
        if value == DIGITS_CNN:
            return value
        from stages.artifacts.torchvision_models import (
            torchvision_model_names,
            unknown_torchvision_message,
        )

        message = unknown_torchvision_message(value, [DIGITS_CNN, *torchvision_model_names()])
        if message:
            raise ValueError(message)
        return value

    @model_validator(mode="after")
    def _classes_fit(self) -> ModelChoiceConfig:
        if isinstance(self.model, ModelEntry):
            if self.model.format == "onnx" and (self.dtype != "float32" or self.compile):
                raise ValueError("an ONNX model runs as exported: float32, without `compile`")
            if self.weights is not None:
                raise ValueError(
                    "`weights` names a built-in model's weights: a model entry brings its own"
                )
            return self
        if self.model == DIGITS_CNN and self.num_classes not in (None, 10):
            raise ValueError("digits_cnn has 10 classes: leave num_classes out")
        if (
            self.model != DIGITS_CNN
            and self.weights == "pretrained"
            and self.num_classes not in (None, 1000)
        ):
            raise ValueError("pretrained torchvision weights have 1000 classes: num_classes 1000")
        return self

    def labels_map(self) -> list[int] | None:
        """An entry's `labels` (model output -> dataset label), once read into a list."""
        entry = self.model
        return (
            entry.labels
            if isinstance(entry, ModelEntry) and isinstance(entry.labels, list)
            else None
        )

    def images_problems(self, images_in: ImageBatch) -> list[tuple[str, str]]:
        from stages.library.models.fit import builtin_signature, entry_signature, fit_problems

        if isinstance(self.model, ModelEntry):
            if isinstance(self.model.labels, str):  # a file not yet read: the classes wait
                images_in = replace(images_in, classes=None)
            signature = entry_signature(self.model)
        else:
            signature = builtin_signature(self.model, self.num_classes)
        return fit_problems(signature, images_in, self.labels_map())


def load_classifier(config: ModelChoiceConfig) -> Any:
    """The `nn.Module` a model stage runs (CPU, float32), from its artefact."""
    from stages.artifacts.registry import ensure_artifact
    from stages.artifacts.torchvision_models import load_torchvision_model
    from stages.artifacts.vision_artifacts import build_digits_cnn, load_digits_cnn

    if isinstance(config.model, ModelEntry):
        from stages.library.models.loaders import load_torch_model

        return load_torch_model(config.model)
    if config.model == DIGITS_CNN:
        if config.weights == "random":
            import torch

            torch.manual_seed(config.seed)
            return build_digits_cnn()
        return load_digits_cnn(ensure_artifact(DIGITS_CNN))
    params = {
        "name": config.model,
        "seed": config.seed,
        "num_classes": config.num_classes or 1000,
        "weights": config.weights or "random",
    }
    return load_torchvision_model(ensure_artifact("torchvision_model", params))

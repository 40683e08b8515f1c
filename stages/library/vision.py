"""torchvision stages: preprocess image batches, classify them (graded when labels travel
along), and train a classifier one optimiser step per query.

Payloads are dicts: `{"images": tensor [B,C,H,W], "labels": tensor [B]}` in (what the dataset
stages serve); each stage builds a new dict, never changing the one it was given (a fork may
share it). torch and torchvision are imported in `prepare` and in validators, never at import.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from stages.library.profiling import OperatorProfiler
from stages.library.torch_common import ModelStageConfig, device_synchronizer
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig, StageContext
from stages.spec.model_entry import ModelEntry

DIGITS_CNN = "digits_cnn"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def images_of(payload: Any) -> Any:
    """The image tensor of a payload: its `images` entry, or the payload itself."""
    if isinstance(payload, dict):
        if "images" not in payload:
            raise ValueError(f"payload has no 'images' (keys: {sorted(payload)})")
        return payload["images"]
    if payload is None:
        raise ValueError("no payload: put a dataset stage before this one")
    return payload


def labels_of(payload: Any) -> Any:
    """The label tensor of a payload, or None when no labels travel with it."""
    return payload.get("labels") if isinstance(payload, dict) else None


# --------------------------------------------------------------------------- preprocess


class PreprocessConfig(StageConfig):
    size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Resize to size x size (bilinear); null keeps the input size.",
    )
    mean: list[float] = Field(
        list(IMAGENET_MEAN),
        min_length=1,
        description="Per-channel mean subtracted after scaling to [0,1] (one value = every "
        "channel); default ImageNet's.",
    )
    std: list[float] = Field(
        list(IMAGENET_STD),
        min_length=1,
        description="Per-channel standard deviation divided by (one value = every channel).",
    )

    @model_validator(mode="after")
    def _same_channels(self) -> PreprocessConfig:
        if len(self.mean) != len(self.std):
            raise ValueError(
                f"mean has {len(self.mean)} values and std {len(self.std)}: give one per channel"
            )
        if any(value <= 0 for value in self.std):
            raise ValueError("std values must be > 0")
        return self


class PreprocessStage(Stage[PreprocessConfig]):
    """ONE QUERY = one batch: uint8 images become float in [0,1] (float images pass as they
    are), on the pipeline's device, resized to `size` and normalised with `mean`/`std`."""

    def prepare(self) -> None:
        import torch
        import torch.nn.functional as functional

        self._torch = torch
        self._interpolate = functional.interpolate
        self._device = torch.device(self.context.device)
        shape = (1, len(self.config.mean), 1, 1)
        self._mean = torch.tensor(self.config.mean, device=self._device).reshape(shape)
        self._std = torch.tensor(self.config.std, device=self._device).reshape(shape)
        self._identity = all(m == 0 for m in self.config.mean) and all(
            s == 1 for s in self.config.std
        )
        self._synchronize = device_synchronizer(self.context.device)

    def run(self, query: Query) -> Route:
        torch = self._torch
        images = images_of(query.payload)
        # no_grad, not inference_mode: a training stage downstream cannot use inference tensors.
        with torch.no_grad():
            x = images.to(self._device, non_blocking=True)
            # Out-of-place ops only: `x` may be the upstream tensor itself.
            x = x.float().div(255.0) if x.dtype == torch.uint8 else x.float()
            channels = x.shape[1]
            if self._mean.shape[1] not in (1, channels):
                raise ValueError(
                    f"mean/std have {self._mean.shape[1]} values but the images have "
                    f"{channels} channels"
                )
            size = self.config.size
            if size is not None and tuple(x.shape[-2:]) != (size, size):
                x = self._interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            if not self._identity:
                x = (x - self._mean) / self._std
        self._synchronize()
        payload = query.payload
        query.payload = {**payload, "images": x} if isinstance(payload, dict) else {"images": x}
        return None


# --------------------------------------------------------------------------- models


CLASSIFIER_FORMATS = frozenset(
    {"hf_folder", "onnx", "torch_export", "torchscript", "torchvision_weights"}
)
"""Model entry formats a classifier stage loads (stages.library.model_files)."""


class ModelChoiceConfig(ModelStageConfig):
    """Which classifier a model stage runs, and with which weights."""

    model_entry_fields: ClassVar[tuple[str, ...]] = ("model",)
    model: str | ModelEntry = Field(
        DIGITS_CNN,
        description="digits_cnn (the small CNN trained on digits), a torchvision classifier "
        "name (torchvision.models.list_models(module=torchvision.models)), e.g. resnet18, or "
        "a model entry: a file the user brings (`onnx`, `torch_export`, `torchscript`, or "
        "`weights` with `arch`; stages.spec.model_entry).",
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


def load_classifier(config: ModelChoiceConfig) -> Any:
    """The `nn.Module` a model stage runs (CPU, float32), from its artefact."""
    from stages.artifacts.catalogue import ensure_artifact
    from stages.artifacts.torchvision_models import load_torchvision_model
    from stages.artifacts.vision import build_digits_cnn, load_digits_cnn

    if isinstance(config.model, ModelEntry):
        from stages.library.model_files import load_torch_model

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


ModelChoiceConfigT = TypeVar("ModelChoiceConfigT", bound=ModelChoiceConfig)


class _ModelStage(Stage[ModelChoiceConfigT]):
    """What classify and train share: the model on the device, dtype, threads, compile,
    profiler and synchroniser."""

    def __init__(self, config: ModelChoiceConfigT, context: StageContext) -> None:
        super().__init__(config, context)
        self.profiler = OperatorProfiler(config.profile_every, context)

    def _prepare_model(self, train: bool) -> Any:
        import torch

        if self.config.threads is not None:
            torch.set_num_threads(self.config.threads)
        self._torch = torch
        self._device = torch.device(self.context.device)
        self._dtype = getattr(torch, self.config.dtype)
        entry = self.config.model
        if isinstance(entry, ModelEntry) and entry.format == "onnx":
            from stages.library.model_files import load_onnx_model

            model = load_onnx_model(entry, self.context.device, self.config.threads)
        else:
            model = load_classifier(self.config).to(self._device, self._dtype)
        if train or not isinstance(entry, ModelEntry):
            model.train(train)  # a brought model loads for inference (an exported one can't switch)
        self._synchronize = device_synchronizer(self.context.device)
        return model

    def _example_input(self, model: Any) -> Any:
        """A one-image batch of the model's input shape; None when a model entry's file does
        not say its shape (a TorchScript module)."""
        if isinstance(self.config.model, ModelEntry):
            from stages.library.model_files import input_shape

            shape = input_shape(model)
            if shape is None:
                return None
        else:
            side, channels = (8, 1) if self.config.model == DIGITS_CNN else (224, 3)
            shape = (1, channels, side, side)
        return self._torch.zeros(shape, device=self._device, dtype=self._dtype)

    def _inputs(self, query: Query) -> Any:
        return images_of(query.payload).to(self._device, self._dtype, non_blocking=True)


class ClassifyConfig(ModelChoiceConfig):
    """Options of `torchvision.classify`: the model choice and the model-stage options."""


class ClassifyStage(_ModelStage[ClassifyConfig]):
    """ONE QUERY = one forward pass of the classifier on the payload's batch, under
    `torch.inference_mode()`. When labels travel with it, the batch is graded: `graded` =
    batch size, `correct` = top-1 predictions equal to the label. Payload out:
    `{"predictions": int64 [B], "labels": [B] or None}`."""

    records_outcome = True

    def prepare(self) -> None:
        model = self._prepare_model(train=False)
        if self.config.compile:
            model = self._torch.compile(model)
        # One call before the barrier: compilation, and the lazy first-call set-up (cuDNN and
        # cuBLAS handles, kernel loading, oneDNN primitives), never land in a timed query.
        example = self._example_input(model)
        with self._torch.inference_mode():
            if example is not None:
                model(example)
        self._synchronize()
        self._model = model

    def run(self, query: Query) -> Route:
        torch = self._torch
        labels = labels_of(query.payload)
        with torch.inference_mode():
            x = self._inputs(query)
            with self.profiler.around(query):
                logits = self._model(x)
            predictions = logits.argmax(1)
            if labels is not None:
                query.graded = int(labels.shape[0])
                query.correct = int((predictions == labels.to(predictions.device)).sum())
        self._synchronize()  # finished_ns must come after the device has finished
        query.payload = {"predictions": predictions, "labels": labels}
        return None


TRAINABLE_FORMATS = frozenset({"torchscript", "torchvision_weights"})
"""Model entry formats `torchvision.train` trains (an ONNX model and an exported program run
inference only)."""


class TrainConfig(ModelChoiceConfig):
    optimizer: Literal["sgd", "adamw"] = Field("sgd", description="Optimiser of the steps.")
    lr: float = Field(0.01, gt=0, description="Learning rate.")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum (sgd only).")
    weight_decay: float = Field(0.0, ge=0, description="Weight decay.")

    @model_validator(mode="after")
    def _trainable(self) -> TrainConfig:
        if isinstance(self.model, ModelEntry) and self.model.format not in TRAINABLE_FORMATS:
            formats = ", ".join(sorted(TRAINABLE_FORMATS))
            raise ValueError(f"training takes {formats} entries, not {self.model.format}")
        return self


class TrainStage(_ModelStage[TrainConfig]):
    """ONE QUERY = one optimiser step (forward, cross-entropy loss, backward, step) on the
    payload's batch and labels; `loss` = that step's loss. The model starts from its artefact
    (seeded random init, or pretrained) in every phase. With `compile`, the first steps
    compile (a step in prepare would change the weights): cover them with warm-up queries.
    Payload out: `{"loss": float}`."""

    records_outcome = True

    def prepare(self) -> None:
        import torch

        model = self._prepare_model(train=True)
        parameters = model.parameters()
        config = self.config
        if config.optimizer == "sgd":
            self._optimiser: Any = torch.optim.SGD(
                parameters, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
            )
        else:
            self._optimiser = torch.optim.AdamW(
                parameters, lr=config.lr, weight_decay=config.weight_decay
            )
        self._model = torch.compile(model) if config.compile else model
        self._loss = torch.nn.functional.cross_entropy

    def run(self, query: Query) -> Route:
        labels = labels_of(query.payload)
        if labels is None:
            raise ValueError("training needs labels in the payload")
        x = self._inputs(query)
        y = labels.to(self._device, non_blocking=True)
        with self.profiler.around(query):
            self._optimiser.zero_grad(set_to_none=True)
            loss = self._loss(self._model(x), y)
            loss.backward()
            self._optimiser.step()
        query.loss = float(loss.detach())
        self._synchronize()
        query.payload = {"loss": query.loss}
        return None

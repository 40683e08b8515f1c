"""torchvision stages: preprocess image batches, classify them (graded when labels travel
along), and train a classifier one optimiser step per query.

Payloads are dicts: `{"images": tensor [B,C,H,W], "labels": tensor [B]}` in (what the dataset
stages serve); each stage builds a new dict, never changing the one it was given (a fork may
share it). torch and torchvision are imported in `prepare` and in validators, never at import.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, TypeVar

from pydantic import Field, model_validator

from stages.contracts.image_batches import ImageBatch
from stages.library.core.profiling import OperatorProfiler
from stages.library.core.torch_common import device_synchronizer
from stages.library.models.classifier_choice import DIGITS_CNN, ModelChoiceConfig, load_classifier
from stages.library.models.fit import check_answers
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig, StageContext
from stages.spec.model_entry import ModelEntry

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

    def images_out(self, images_in: ImageBatch | None) -> ImageBatch | None:
        if images_in is None:
            return None
        side = self.size
        height, width = (side, side) if side is not None else (images_in.height, images_in.width)
        return replace(images_in, height=height, width=width, dtype="float32")

    def images_problems(self, images_in: ImageBatch) -> list[tuple[str, str]]:
        if len(self.mean) in (1, images_in.channels):
            return []
        message = f"{len(self.mean)} values for {images_in.channels}-channel images"
        return [("mean", f"{message} (the stage before gives {images_in.describe()})")]


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
            from stages.library.models.loaders import load_onnx_model

            model = load_onnx_model(entry, self.context.device, self.config.threads)
        else:
            model = load_classifier(self.config).to(self._device, self._dtype)
        if train or not isinstance(entry, ModelEntry):
            model.train(train)  # a brought model loads for inference (an exported one can't switch)
        self._synchronize = device_synchronizer(self.context.device)
        return model

    def _example_input(self, model: Any) -> Any:
        """A one-image batch of what the stage before makes, else of the model's input shape;
        None when neither is known (a TorchScript module after an undeclared stage)."""
        images_in = self.context.images_in
        shape: tuple[int, ...] | None
        if images_in is not None:
            shape = (1, *images_in.image_shape)
        elif isinstance(self.config.model, ModelEntry):
            from stages.library.models.loaders import input_shape

            shape = input_shape(model)
        else:
            side, channels = (8, 1) if self.config.model == DIGITS_CNN else (224, 3)
            shape = (1, channels, side, side)
        if shape is None:
            return None
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
                check_answers(self.config, self.context.images_in, lambda: model(example))
        self._synchronize()
        self._model = model
        labels = self.config.labels_map()
        self._label_of = None if labels is None else self._torch.tensor(labels, device=self._device)

    def run(self, query: Query) -> Route:
        torch = self._torch
        labels = labels_of(query.payload)
        with torch.inference_mode():
            x = self._inputs(query)
            with self.profiler.around(query):
                logits = self._model(x)
            predictions = logits.argmax(1)
            if self._label_of is not None:  # model output -> dataset label (`labels`)
                predictions = self._label_of[predictions]
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
        if isinstance(self.model, ModelEntry) and self.model.labels is not None:
            raise ValueError("training learns the dataset's labels: leave `labels` out")
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

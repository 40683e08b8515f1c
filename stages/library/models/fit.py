"""Does a classifier fit the image batches it gets? Its signature (input channels and size,
output width), read from the model file without running it where the format says (ONNX graph
inputs and outputs, a `torch.export` program's placeholders, a weights file's tensor shapes, a
Hugging Face folder's config), is compared with the batches (`ImageBatch`) and the `labels`
mapping before the run; `prepare` repeats the check on the loaded model with one real call.

torch, torchvision and onnx are imported inside the readers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.contracts.image_batches import ImageBatch
from stages.library.models.common import ModelFileError, located, model_file_reason
from stages.spec.model_entry import ModelEntry, ModelFormat

if TYPE_CHECKING:
    from stages.library.models.classifier_choice import ModelChoiceConfig

DIGITS_CNN_SIGNATURE_SIDE = 8  # digits_cnn's linear layer takes 32 x 4 x 4: 8x8 images


@dataclass(frozen=True)
class ModelSignature:
    """What a classifier takes and gives; None where the file does not say (any size)."""

    channels: int | None = None
    height: int | None = None
    width: int | None = None
    output_width: int | None = None
    input_type: str | None = None
    """An ONNX graph's input element type (`float`); None for a torch model, which takes the
    stage's dtype."""


def fit_problems(
    signature: ModelSignature, images: ImageBatch, labels: Sequence[int] | None
) -> list[tuple[str, str]]:
    """(config field, message) for each way the model cannot take `images` or answer in the
    dataset's classes: channels, image size, input type, output width against the classes or
    the `labels` mapping (its length, and labels the dataset does not have)."""
    given = f"the stage before gives {images.describe()}"
    problems = []
    if signature.channels is not None and signature.channels != images.channels:
        problems.append(("model", f"the model takes {signature.channels}-channel images; {given}"))
    wanted_size = (signature.height, signature.width)
    if None not in wanted_size and wanted_size != (images.height, images.width):
        size = f"{signature.height}x{signature.width}"
        problems.append(
            ("model", f"the model takes {size} images; {given} (resize with preprocess `size`)")
        )
    if signature.input_type not in (None, "float"):
        problems.append(
            ("model", f"the model's input is {signature.input_type}; classify feeds float32")
        )
    problems += _output_problems(signature.output_width, images.classes, labels)
    return problems


def check_answers(
    config: ModelChoiceConfig, images_in: ImageBatch | None, call: Callable[[], Any]
) -> None:
    """Make `prepare`'s one call (`call`: the model on a one-image batch) and, with the batches
    known, fail it in one line when the model cannot take them or answers in other classes
    than the dataset's (or `labels`'): what validation could not read from the file."""
    model = config.model
    name = model.location if isinstance(model, ModelEntry) else model
    try:
        logits = call()
    except Exception as error:
        if images_in is None:
            raise
        raise ModelFileError(
            f"{name}: cannot take {images_in.describe_images()}: {model_file_reason(error)}"
        ) from error
    if images_in is None:
        return
    problems = _output_problems(int(logits.shape[-1]), images_in.classes, config.labels_map())
    if problems:
        raise ModelFileError(f"{name}: {problems[0][1]}")


def _output_problems(
    width: int | None, classes: int | None, labels: Sequence[int] | None
) -> list[tuple[str, str]]:
    if labels is not None:
        if width is not None and len(labels) != width:
            return [
                (
                    "model.labels",
                    f"{len(labels)} labels for a model with {width} outputs: give one "
                    "dataset label per output",
                )
            ]
        unknown = sorted({label for label in labels if classes is not None and label >= classes})
        if unknown:
            return [
                (
                    "model.labels",
                    f"labels {unknown[:5]} are not among the dataset's {classes} classes",
                )
            ]
        return []
    if width is not None and classes is not None and width != classes:
        return [
            (
                "model",
                f"the model has {width} outputs but the dataset has {classes} classes: map "
                "outputs to dataset labels with `labels` (an entry's), or give a model with "
                f"{classes} outputs",
            )
        ]
    return []


def builtin_signature(model: str, num_classes: int | None) -> ModelSignature:
    """digits_cnn: 1-channel 8x8 images, 10 classes; a torchvision classifier: 3 channels, any
    size (adaptive pooling), `num_classes` (1000 by default)."""
    if model == "digits_cnn":
        side = DIGITS_CNN_SIGNATURE_SIDE
        return ModelSignature(1, side, side, num_classes or 10)
    return ModelSignature(3, None, None, num_classes or 1000)


def entry_signature(entry: ModelEntry) -> ModelSignature:
    """What the entry's file declares (nothing for a TorchScript module: `prepare` finds out).
    A file that cannot be read here declares nothing: loading it in `prepare` says why."""
    reader = SIGNATURE_READERS.get(entry.format)
    if reader is None:
        return ModelSignature()
    try:
        entry = located(entry, build=False)  # an artefact not built yet: prepare checks it
        return reader(Path(entry.location), entry)
    except Exception:  # a corrupt file: prepare's loader gives the reason, in one line
        return ModelSignature()


def _fixed(sizes: Sequence[Any]) -> list[int | None]:
    """Sizes as ints, a symbolic one (a dynamic dimension) as None."""
    return [size if isinstance(size, int) and size > 0 else None for size in sizes]


def _image_signature(
    input_sizes: Sequence[int | None], output_sizes: Sequence[int | None], input_type: str | None
) -> ModelSignature:
    if len(input_sizes) != 4:  # not [B, C, H, W]: say nothing rather than something wrong
        return ModelSignature(output_width=output_sizes[-1] if output_sizes else None)
    _, channels, height, width = input_sizes
    output_width = output_sizes[-1] if output_sizes else None
    return ModelSignature(channels, height, width, output_width, input_type)


def _onnx_signature(path: Path, entry: ModelEntry) -> ModelSignature:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {tensor.name for tensor in graph.initializer}
    first = next(value for value in graph.input if value.name not in initializers)
    tensor = first.type.tensor_type
    sizes = _fixed(
        [dim.dim_value if dim.HasField("dim_value") else None for dim in tensor.shape.dim]
    )
    out = graph.output[0].type.tensor_type.shape.dim
    out_sizes = _fixed([dim.dim_value if dim.HasField("dim_value") else None for dim in out])
    element = onnx.TensorProto.DataType.Name(tensor.elem_type).lower()
    return _image_signature(sizes, out_sizes, element)


def _export_signature(path: Path, entry: ModelEntry) -> ModelSignature:
    import torch

    program = torch.export.load(str(path))
    user_inputs = set(program.graph_signature.user_inputs)
    nodes = list(program.graph.nodes)
    first = next(node for node in nodes if node.op == "placeholder" and node.name in user_inputs)
    output = next(node for node in nodes if node.op == "output").args[0][0]
    return _image_signature(
        _fixed(list(first.meta["val"].shape)), _fixed(list(output.meta["val"].shape)), None
    )


def _weights_signature(path: Path, entry: ModelEntry) -> ModelSignature:
    import torchvision

    assert entry.arch is not None  # the entry's validator pairs `weights` with `arch`
    default = torchvision.models.get_model(entry.arch, weights=None).state_dict()
    shapes = _tensor_shapes(path)
    first_conv = next((key for key, value in default.items() if value.ndim == 4), None)
    heads = [key for key, value in default.items() if value.ndim and value.shape[0] == 1000]
    channels = shapes[first_conv][1] if first_conv in shapes else None
    width = shapes[heads[-1]][0] if heads and heads[-1] in shapes else None
    return ModelSignature(channels, None, None, width)


def _tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a weights file, from a safetensors header (nothing else read) or
    a state dict mapped from disk."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {key: tuple(value.shape) for key, value in state.items()}


def _hf_signature(path: Path, entry: ModelEntry) -> ModelSignature:
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    labels = config.get("id2label") or {}
    width = len(labels) if labels else config.get("num_labels")
    side = config.get("image_size")
    side = side if isinstance(side, int) else None
    return ModelSignature(config.get("num_channels"), side, side, width)


SIGNATURE_READERS: dict[ModelFormat, Callable[[Path, ModelEntry], ModelSignature]] = {
    "onnx": _onnx_signature,
    "torch_export": _export_signature,
    "torchvision_weights": _weights_signature,
    "hf_folder": _hf_signature,
}
"""Format -> reader of what its files declare, without running the model."""

"""A model file a user brings (`stages.spec.model_entry`), loaded as a torch module: the
weights of a torchvision architecture (safetensors, or a state dict read with `weights_only`),
a TorchScript module or a `torch.export` program. One loader per format, in a registry.

Nothing here unpickles arbitrary objects: a state dict is read with `weights_only=True`, so a
`.pt` file holding a pickled full model is refused with the reason, before any of its code
could run. A file that does not load fails the stage's prepare (outside every load window)
with one line: the file, the format and the loader's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stages.contracts.errors import InvalidInputError
from stages.spec.model_entry import ModelEntry, ModelFormat

REASON_CHARS = 300  # of the loader's message, on the one line a failed load gives


class ModelFileError(InvalidInputError, ValueError):
    """A model file that cannot be loaded as the format its entry names."""


def load_torch_model(entry: ModelEntry) -> Any:
    """The module `entry` names, on the CPU in float32 (the stage moves it)."""
    loader = TORCH_LOADERS.get(entry.format)
    if loader is None:
        raise ModelFileError(f"{entry.location}: a {entry.format} model does not load into torch")
    try:
        return loader(entry)
    except ModelFileError:
        raise
    except Exception as error:  # a corrupt file, an unsupported operator, a wrong format
        reason = " ".join(str(error).split())[:REASON_CHARS] or type(error).__name__
        raise ModelFileError(
            f"{entry.location}: cannot load as {entry.format}: {reason}"
        ) from error


def _state_dict(path: Path) -> dict[str, Any]:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        if "weights_only" in str(error) or "Unsupported global" in str(error):
            raise ModelFileError(
                f"{path}: holds pickled objects, not only tensors (a full model saved with "
                "torch.save(model)?): save model.state_dict(), or use safetensors"
            ) from None
        raise
    if not isinstance(state, dict):
        raise ModelFileError(f"{path}: not a state dict (a mapping of names to tensors)")
    return state


def _torchvision_weights(entry: ModelEntry) -> Any:
    import torchvision

    assert entry.arch is not None  # the entry's validator pairs `weights` with `arch`
    state = _state_dict(Path(entry.location))
    # The file's class count: the width of the architecture's last layer with the default
    # 1000 outputs, as the file has it (a safetensors file orders its keys by name).
    default = torchvision.models.get_model(entry.arch, weights=None).state_dict()
    heads = [key for key, value in default.items() if value.ndim and value.shape[0] == 1000]
    num_classes = int(state[heads[-1]].shape[0]) if heads and heads[-1] in state else 1000
    model = torchvision.models.get_model(entry.arch, weights=None, num_classes=num_classes)
    model.load_state_dict(state)
    return model.eval()


def _torchscript(entry: ModelEntry) -> Any:
    import torch

    module = torch.jit.load(entry.location, map_location="cpu")  # type: ignore[no-untyped-call]
    return module.eval()


def _torch_export(entry: ModelEntry) -> Any:
    import torch

    return torch.export.load(entry.location).module()


TORCH_LOADERS: dict[ModelFormat, Callable[[ModelEntry], Any]] = {
    "torchvision_weights": _torchvision_weights,
    "torchscript": _torchscript,
    "torch_export": _torch_export,
}
"""Format -> loader of the formats a torch module comes from."""

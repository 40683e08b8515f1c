"""A local Hugging Face model folder a user brings (`model: {path: DIR}`), loaded offline with
the Auto class of the stage's task: a causal LM or an encoder with its tokenizer
(`transformers.generate`, `transformers.embed`), or an image classifier
(`torchvision.classify`) wrapped so a call on an image batch returns its logits.

A folder's own model code (`trust_remote_code`) runs only when the entry asks for it AND the
environment allows it (`COLLOBENCH_ALLOW_REMOTE_CODE=1`); otherwise transformers is told not to
run it. A folder that does not load fails the stage's prepare with one line naming it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from stages.library.models.common import (
    INPUT_SHAPE_ATTRIBUTE,
    ModelFileError,
    located,
    model_file_reason,
)
from stages.spec.model_entry import (
    ALLOW_REMOTE_CODE_ENV,
    ModelEntry,
    content_sha256,
    remote_code_allowed,
)

TOKENIZER_PROBE = "hello world"
"""Text any real tokenizer turns into at least one token."""


def trust_remote_code(entry: ModelEntry) -> bool:
    """Whether transformers may run the folder's own code: only when the entry asks and the
    environment allows (validation refuses the one without the other; a worker whose
    environment differs from the validating one is refused here too)."""
    if entry.trust_remote_code and not remote_code_allowed():
        raise ModelFileError(
            f"{entry.location}: trust_remote_code needs {ALLOW_REMOTE_CODE_ENV}=1 in the "
            "environment of the process loading it"
        )
    return entry.trust_remote_code


def folder_label(entry: ModelEntry) -> str:
    """`path:<folder name>@<sha256[:12]>`: the model a result came from, as recorded."""
    digest = entry.sha256 or content_sha256(Path(entry.location))
    return f"path:{Path(entry.location).name}@{digest[:12]}"


def _failed(entry: ModelEntry, error: Exception) -> ModelFileError:
    return ModelFileError(f"{entry.location}: cannot load as hf_folder: {model_file_reason(error)}")


def load_hf_text_model(
    entry: ModelEntry, task: Literal["causal_lm", "encoder"]
) -> tuple[Any, Any, str]:
    """(model in eval mode, tokenizer, label) of a text model folder, hub offline."""
    from stages.artifacts.hub import load_pretrained

    entry = located(entry)
    trust = trust_remote_code(entry)
    try:
        model, tokenizer = load_pretrained(entry.location, task, True, trust_remote_code=trust)
        # transformers builds an empty tokenizer from a config alone: refuse it here, not
        # with an empty batch in the first query.
        if not tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]:
            raise ValueError("its tokenizer is empty (no tokenizer files in the folder?)")
    except Exception as error:  # no tokenizer, a broken config, weights that do not fit
        raise _failed(entry, error) from error
    return model, tokenizer, folder_label(entry)


@functools.cache
def _logits_module() -> type:
    """The torch module class answering an image batch with an HF classifier's logits (made
    once, on first use: torch is not imported at module level)."""
    import torch

    class HfImageLogits(torch.nn.Module):
        """`model(pixel_values=x).logits`, so the classify stage calls it as any classifier."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.model(pixel_values=x).logits
            return logits

    return HfImageLogits


def _image_shape(config: Any) -> tuple[int, ...] | None:
    """(1, channels, height, width) from an HF config that gives them, else None."""
    channels, size = getattr(config, "num_channels", None), getattr(config, "image_size", None)
    if isinstance(size, int):
        size = (size, size)
    if not isinstance(channels, int) or not isinstance(size, list | tuple) or len(size) != 2:
        return None
    return (1, channels, int(size[0]), int(size[1]))


def load_hf_classifier(entry: ModelEntry) -> Any:
    """An image classifier folder (AutoModelForImageClassification) as a torch module whose
    call on [B, C, H, W] returns logits [B, classes]; its config's input shape, when it gives
    one, is what `loaders.input_shape` reports."""
    from transformers import AutoModelForImageClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    trust = trust_remote_code(entry)
    try:
        model = AutoModelForImageClassification.from_pretrained(
            entry.location, local_files_only=True, trust_remote_code=trust
        ).eval()
    except Exception as error:  # not a folder of an image classifier, a broken config
        raise _failed(entry, error) from error
    wrapped = _logits_module()(model).eval()
    setattr(wrapped, INPUT_SHAPE_ATTRIBUTE, _image_shape(model.config))
    return wrapped

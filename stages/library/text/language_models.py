"""What the model stages for text share: loading a causal LM or encoder by name (`tiny_lm`,
`minilm`, or `hf:<org>/<name>`) or from a model entry's folder (`{path: DIR}`), moving it to
its device, and the check of a `model` field.

torch and transformers are imported inside the functions: specs validate without them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AfterValidator

from stages.artifacts.hub import check_hub_reference
from stages.spec.model_entry import ModelEntry


def load_text_model(
    reference: str | ModelEntry, task: Literal["causal_lm", "encoder"], params: dict[str, Any]
) -> tuple[Any, Any, str]:
    """(model, tokenizer, description) for `tiny_lm`, `minilm`, `hf:<name>` or a model entry's
    Hugging Face folder, in eval mode."""
    from stages.artifacts.hub import hub_name, load_hub_model
    from stages.artifacts.registry import ensure_artifact

    if isinstance(reference, ModelEntry):
        from stages.library.models.hf_folders import load_hf_text_model

        return load_hf_text_model(reference, task)
    name = hub_name(reference)
    if name is not None:
        model, tokenizer = load_hub_model(name, task)
        return model.eval(), tokenizer, f"hub:{name}"
    built = ensure_artifact(reference, params)
    if task == "encoder":
        from stages.artifacts.text_artifacts import load_encoder

        model, tokenizer = load_encoder(built.path)
        return model, tokenizer, f"{reference}@{built.content_hash[:12]}"
    from stages.artifacts.hub import load_pretrained

    model, tokenizer = load_pretrained(built.path, "causal_lm", local_files_only=True)
    return model, tokenizer, f"{reference}@{built.content_hash[:12]}"


def to_device(model: Any, device: str, dtype: str, threads: int | None) -> Any:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return model.to(device=device, dtype=getattr(torch, dtype))


def model_reference(local: str, kind: str = "model") -> AfterValidator:
    """The check of a `model` field: `local` (an artefact built here), a well-formed
    `hf:<org>/<name>` (checked without a download) or a model entry naming a Hugging Face
    folder (`path`; the other formats are not text models)."""

    def known(value: str | ModelEntry) -> str | ModelEntry:
        if isinstance(value, ModelEntry):
            if value.format != "hf_folder":
                raise ValueError(
                    f"a text model entry is a Hugging Face folder (`path`), not {value.format}"
                )
            if value.labels is not None:
                raise ValueError("`labels` maps a classifier's outputs: not for a text model")
            return value
        if value == local:
            return value
        if value.startswith("hf:"):
            check_hub_reference(value)
            return value
        raise ValueError(
            f"unknown {kind} '{value}': use {local}, hf:<org>/<name> or {{path: <folder>}}"
        )

    return AfterValidator(known)

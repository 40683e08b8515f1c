"""The `torchvision_model` artefact: a torchvision classifier's weights, seeded random or
pretrained (torchvision's DEFAULT weights from the torch hub cache, downloaded when absent).

torch and torchvision are imported inside the functions that need them, never at import time.
"""

from __future__ import annotations

import difflib
import functools
import os
import socket
import urllib.error
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator

from stages.artifacts.store import (
    ArtifactBuilder,
    ArtifactError,
    ArtifactParams,
    BuiltArtifact,
    single_thread_torch,
)

PRETRAINED_DOWNLOAD_TIMEOUT_S = 10.0
"""Socket timeout of a pretrained-weights download: no network fails within it, never hangs."""


@functools.cache
def torchvision_model_names() -> list[str]:
    """Every classification model name torchvision knows (imports torchvision once)."""
    from torchvision import models

    return list(models.list_models(module=models))


def unknown_torchvision_message(name: str, names: list[str]) -> str | None:
    """None when `name` is a torchvision classifier; else a one-line message with close
    matches."""
    if name in names:
        return None
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (
        f"unknown torchvision model '{name}'{hint} "
        "(see torchvision.models.list_models(module=torchvision.models))"
    )


class TorchvisionModelParams(ArtifactParams):
    name: str = Field(description="A torchvision classifier, e.g. resnet18.")
    seed: int = Field(0, description="Seed of the random initial weights.")
    num_classes: int = Field(1000, ge=1, description="Classes of the final layer.")
    weights: Literal["random", "pretrained"] = Field(
        "random",
        description="random: seeded init; pretrained: torchvision's DEFAULT weights from the "
        "local torch hub cache (downloaded when absent and a network is there).",
    )

    @field_validator("name")
    @classmethod
    def _known_name(cls, value: str) -> str:
        message = unknown_torchvision_message(value, torchvision_model_names())
        if message:
            raise ValueError(message)
        return value

    @model_validator(mode="after")
    def _pretrained_classes(self) -> TorchvisionModelParams:
        if self.weights == "pretrained" and self.num_classes != 1000:
            raise ValueError("pretrained weights have 1000 classes (ImageNet-1K): num_classes 1000")
        return self


def download_weights(url: str, path: Path, timeout_s: float) -> None:
    """Fetch `url` into `path` with a socket timeout, so no network fails fast (a seam for
    tests)."""
    import torch.hub

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.hub.download_url_to_file(url, str(path), progress=False)
    finally:
        socket.setdefaulttimeout(previous)


class TorchvisionModelBuilder(ArtifactBuilder[TorchvisionModelParams]):
    """A torchvision classifier's weights as `model.safetensors`: seeded random init, or the
    weights enum's DEFAULT (pretrained) read from the torch hub cache."""

    name = "torchvision_model"
    version = "1"
    kind = "model"
    description = "torchvision classifier weights (seeded random or pretrained from the hub cache)"

    def build(
        self, params: TorchvisionModelParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        from safetensors.torch import save_model
        from torchvision import models

        with single_thread_torch(params.seed):
            model = models.get_model(params.name, weights=None, num_classes=params.num_classes)
            extra: dict[str, Any] = {"source": "seeded random init (torchvision.models)"}
            if params.weights == "pretrained":
                state, extra = self._pretrained_state(params.name)
                model.load_state_dict(state)
        # save_model drops tensors that share memory (tied weights) and load_model restores them.
        save_model(model, str(out_dir / "model.safetensors"), metadata={"model": params.name})
        return {
            **extra,
            "architecture": params.name,
            "parameters": sum(p.numel() for p in model.parameters()),
            "classes": params.num_classes,
            "seed": params.seed,
        }

    def _pretrained_state(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        import torch
        import torch.hub
        from torchvision import models

        weights = models.get_model_weights(name).DEFAULT
        filename = os.path.basename(urlparse(weights.url).path)
        path = Path(torch.hub.get_dir()) / "checkpoints" / filename
        source = "torch hub cache"
        if not path.exists():
            try:
                download_weights(weights.url, path, PRETRAINED_DOWNLOAD_TIMEOUT_S)
            except (OSError, urllib.error.URLError, TimeoutError) as error:
                reason = getattr(error, "reason", None) or error
                raise ArtifactError(
                    f"artefact torchvision_model: pretrained weights of {name} are not in the "
                    f"torch hub cache ({path}) and could not be downloaded ({reason}); copy "
                    f"{weights.url} there, or use weights: random"
                ) from None
            source = "downloaded into the torch hub cache"
        state = torch.load(path, map_location="cpu", weights_only=True)
        metrics = weights.meta.get("_metrics", {}).get("ImageNet-1K", {})
        extra: dict[str, Any] = {
            "source": f"{source}: {weights}",
            "weights_url": weights.url,
            "weights_file": filename,
        }
        if "acc@1" in metrics:
            extra["accuracy"] = metrics["acc@1"] / 100.0
            extra["accuracy_source"] = "torchvision weights meta (ImageNet-1K acc@1)"
        return state, extra


def load_torchvision_model(built: BuiltArtifact) -> Any:
    """The classifier of a built `torchvision_model` artefact (CPU, eval mode)."""
    from safetensors.torch import load_model
    from torchvision import models

    metadata = built.metadata
    params = metadata["params"]
    model = models.get_model(params["name"], weights=None, num_classes=params["num_classes"])
    load_model(model, str(built.path / "model.safetensors"))
    return model.eval()


BUILDERS: tuple[ArtifactBuilder[Any], ...] = (TorchvisionModelBuilder(),)

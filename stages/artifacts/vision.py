"""Vision artefacts: the `digits` and `fake_images` datasets, `digits_cnn`, torchvision models."""

from __future__ import annotations

from stages.artifacts.store import ArtifactBuilder

BUILDERS: tuple[ArtifactBuilder, ...] = ()

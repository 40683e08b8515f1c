"""Which artefacts exist: the artefact registry, name -> builder. Vision, torchvision and text
builders live in their own modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stages.artifacts import model_exports, text_artifacts, torchvision_models, vision_artifacts
from stages.artifacts.store import ArtifactBuilder, ArtifactError, ArtifactStore, BuiltArtifact
from stages.name_registry import NameRegistry


class UnknownArtifactError(ArtifactError):
    """A spec, the CLI or a stage named an artefact that has no builder."""


class ArtifactRegistry(NameRegistry[ArtifactBuilder[Any]]):
    """Maps artefact names to their builders; an unknown name lists the known ones."""

    kind = "artefact"
    unknown_error = UnknownArtifactError

    def register(self, builder: ArtifactBuilder[Any]) -> None:
        self.add(builder.name, builder)

    def unknown_message(self, name: str) -> str:
        """Without the did-you-mean hint: spec checks and the CLI print this line as it is."""
        return f"unknown {self.kind} '{name}'; known: {', '.join(self.names()) or 'none'}"


def _builtin_artifacts() -> ArtifactRegistry:
    registry = ArtifactRegistry()
    builders = (*vision_artifacts.BUILDERS, *model_exports.BUILDERS, *torchvision_models.BUILDERS)
    for builder in (*builders, *text_artifacts.BUILDERS):
        registry.register(builder)
    return registry


ARTIFACTS = _builtin_artifacts()


def ensure_artifact(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    store: ArtifactStore | None = None,
    build: bool = True,
) -> BuiltArtifact:
    """The artefact `name` built with `params` (defaults for the rest), building it if needed."""
    builder = ARTIFACTS.get(name)
    store = store if store is not None else ArtifactStore()
    return store.ensure(
        builder,
        store.params(builder, params),
        build=build,
        dependency=lambda dependency, dependency_params: ensure_artifact(
            dependency, dependency_params, store=store
        ),
    )

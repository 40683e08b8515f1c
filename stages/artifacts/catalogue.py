"""Which artefacts exist: name -> builder. Vision, torchvision and text builders live in their
own modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stages.artifacts import text, torchvision_models, vision
from stages.artifacts.store import ArtifactBuilder, ArtifactError, ArtifactStore, BuiltArtifact

BUILDERS: dict[str, ArtifactBuilder[Any]] = {
    builder.name: builder
    for builder in (*vision.BUILDERS, *torchvision_models.BUILDERS, *text.BUILDERS)
}


def builder_named(name: str) -> ArtifactBuilder[Any]:
    try:
        return BUILDERS[name]
    except KeyError:
        raise ArtifactError(
            f"unknown artefact '{name}'; known: {', '.join(sorted(BUILDERS))}"
        ) from None


def ensure_artifact(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    store: ArtifactStore | None = None,
    build: bool = True,
) -> BuiltArtifact:
    """The artefact `name` built with `params` (defaults for the rest), building it if needed."""
    builder = builder_named(name)
    store = store if store is not None else ArtifactStore()
    return store.ensure(builder, store.params(builder, params), build=build)

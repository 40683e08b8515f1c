"""The artefact registry: a NameRegistry whose unknown name is an ArtifactError naming the
known artefacts (the line spec checks, stages and the CLI print)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.artifacts.registry import ARTIFACTS, ArtifactRegistry, UnknownArtifactError
from stages.artifacts.store import ArtifactError
from tests.artifacts.test_store import CountBuilder


def test_an_unknown_artefact_is_an_artifact_error_listing_the_known_ones() -> None:
    registry = ArtifactRegistry()
    registry.register(CountBuilder(Path("unused")))
    with pytest.raises(UnknownArtifactError) as raised:
        registry.get("counts")
    assert isinstance(raised.value, ArtifactError)
    assert str(raised.value) == "unknown artefact 'counts'; known: count"
    assert ArtifactRegistry().unknown_message("x") == "unknown artefact 'x'; known: none"


def test_the_registry_registers_every_builder_under_its_name() -> None:
    assert "prompts" in ARTIFACTS
    assert all(name == builder.name for name, builder in ARTIFACTS.entries().items())

"""A builder states its parameters model once, as `ArtifactBuilder`'s type argument."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from stages.artifacts.registry import ARTIFACTS
from stages.artifacts.store import ArtifactBuilder, ArtifactParams, BuiltArtifact


class _SeedParams(ArtifactParams):
    seed: int = 0


class _SeedBuilder(ArtifactBuilder[_SeedParams]):
    name = "seed_only"

    def build(
        self, params: _SeedParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        return {"seed": params.seed}


class _Subclass(_SeedBuilder):
    name = "seed_only_too"


def test_the_type_argument_sets_params_model() -> None:
    assert _SeedBuilder.params_model is _SeedParams
    assert _Subclass.params_model is _SeedParams  # inherited, not reset


def test_every_catalogued_builder_validates_with_its_type_argument() -> None:
    for name, builder in ARTIFACTS.entries().items():
        (declared,) = (
            get_args(base)[0]
            for base in type(builder).__orig_bases__  # type: ignore[attr-defined]
            if get_args(base)
        )
        assert builder.params_model is declared, name
        assert builder.params_model is not ArtifactParams, name

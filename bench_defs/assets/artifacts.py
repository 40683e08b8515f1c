"""Artefact assets (group `artifacts`): one per dataset and model builder of the stage library.

Materialising one calls `stages.artifacts.registry.ensure_artifact` with the builder's default
recipe (the one the shipped specs use; `torchvision_model` builds `resnet18` with seeded
random weights). The builders import torch, torchvision or scikit-learn inside `build`, so
nothing heavy loads when the code location does, only in the step that builds. A recipe built
before (by a benchmark's stages, or by `collobench artifacts build`) is found, not rebuilt.

`code_version` is the builder's version and the data version is the content hash, so Dagster
shows an artefact as changed exactly when its bytes change.
"""

from typing import Any

import dagster as dg

from bench_defs.core.resources import CollobenchResource
from stages.artifacts.registry import ARTIFACTS
from stages.artifacts.store import ArtifactBuilder, ArtifactStore, BuiltArtifact

ARTIFACTS_GROUP = "artifacts"

DEFAULT_PARAMS: dict[str, dict[str, Any]] = {"torchvision_model": {"name": "resnet18"}}
"""Recipes of builders whose parameters have no default for every field."""


def default_params(name: str) -> dict[str, Any]:
    return dict(DEFAULT_PARAMS.get(name, {}))


def artifact_metadata(built: BuiltArtifact) -> dict[str, Any]:
    """What the UI shows of a built artefact: size, seed, accuracy when known, path, hash."""
    metadata = built.metadata
    params = metadata.get("params") or {}
    files = metadata.get("files") or {}
    result: dict[str, Any] = {
        "kind": str(metadata.get("kind", "")),
        "path": dg.MetadataValue.path(str(built.path)),
        "content_hash": built.content_hash,
        "size_bytes": int(sum(int(size) for size in files.values())),
        "files": len(files),
        "params": dg.MetadataValue.json(params),
        "builder_version": str(metadata.get("builder_version", "")),
    }
    if "seed" in params:
        result["seed"] = int(params["seed"])
    for key in ("accuracy", "test_accuracy"):
        if isinstance(metadata.get(key), int | float):
            result["accuracy"] = float(metadata[key])
            break
    if metadata.get("source"):
        result["source"] = str(metadata["source"])
    if metadata.get("build_seconds") is not None:
        result["build_seconds"] = float(metadata["build_seconds"])
    return result


def _artifact_asset(builder: ArtifactBuilder) -> dg.AssetsDefinition:
    name = builder.name
    params = default_params(name)
    # Not validated here: validating some recipes imports torchvision (its model names).
    recipe = builder.params_model.model_construct(**params)
    upstream = [dependency for dependency, _ in builder.dependencies(recipe)]

    @dg.asset(
        name=name,
        group_name=ARTIFACTS_GROUP,
        code_version=builder.version,
        kinds={builder.kind},
        deps=upstream,
        description=f"{builder.description} ({builder.kind}; builder "
        f"`{name}` v{builder.version}, recipe {params or 'defaults'}).",
    )
    def build_artifact(
        context: dg.AssetExecutionContext, collobench: CollobenchResource
    ) -> dg.MaterializeResult:
        from stages.artifacts.registry import ensure_artifact

        store = ArtifactStore(collobench.home_path() / "artifacts")
        found = store.find(builder, store.params(builder, params))
        context.log.info(f"{name}: {'found built' if found else 'building'} under {store.root}")
        built = found or ensure_artifact(name, params, store=store)
        return dg.MaterializeResult(
            metadata=artifact_metadata(built),
            data_version=dg.DataVersion(built.content_hash),
        )

    return build_artifact


artifact_assets: list[dg.AssetsDefinition] = [
    _artifact_asset(builder) for builder in ARTIFACTS.entries().values()
]
ARTIFACT_NAMES: list[str] = ARTIFACTS.names()

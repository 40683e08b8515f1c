"""An artefact asset materialised in process on a temporary instance: built once, found
again, data version = content hash, metadata for the UI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.assets.artifacts import artifact_assets
from stages.artifacts.registry import ARTIFACTS


def _asset(name: str) -> dg.AssetsDefinition:
    return next(a for a in artifact_assets if a.key == dg.AssetKey(name))


def test_one_asset_per_builder_with_its_version() -> None:
    assert {a.key.to_user_string() for a in artifact_assets} == set(ARTIFACTS.names())
    for asset in artifact_assets:
        assert asset.group_names_by_key[asset.key] == "artifacts"
        assert asset.code_versions_by_key[asset.key] == ARTIFACTS.get(asset.key.path[-1]).version


@pytest.mark.spawns
def test_prompts_asset_builds_then_finds(
    instance: dg.DagsterInstance, resources: dict[str, Any], home: Path
) -> None:
    first = dg.materialize([_asset("prompts")], instance=instance, resources=resources)
    assert first.success
    event = first.get_asset_materialization_events()[0].materialization
    metadata = {key: value.value for key, value in event.metadata.items()}
    path = Path(str(metadata["path"]))
    assert path.parent.parent == home / "artifacts" and path.name == metadata["content_hash"]
    assert (
        int(str(metadata["size_bytes"])) > 0
        and metadata["seed"] == 0
        and metadata["kind"] == "dataset"
    )
    assert event.tags is not None
    assert event.tags["dagster/data_version"] == metadata["content_hash"]
    assert event.tags["dagster/code_version"] == ARTIFACTS.get("prompts").version
    # a second materialisation finds the same bytes: the same data version
    again = dg.materialize([_asset("prompts")], instance=instance, resources=resources)
    tags = again.get_asset_materialization_events()[0].materialization.tags or {}
    assert tags["dagster/data_version"] == metadata["content_hash"]

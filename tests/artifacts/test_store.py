"""The artefact store: one build per recipe, content-hash folders, metadata, one-line errors."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from stages.artifacts import registry
from stages.artifacts.store import (
    METADATA,
    ArtifactBuilder,
    ArtifactError,
    ArtifactParams,
    ArtifactStore,
    BuiltArtifact,
    content_hash,
)
from tests.helpers import REPO


class CountParams(ArtifactParams):
    seed: int = Field(0, description="Seed.")
    size: int = Field(4, ge=1, description="Numbers written.")


class CountBuilder(ArtifactBuilder):
    """Writes `size` numbers derived from the seed; counts its builds in a side file."""

    name = "count"
    params_model: ClassVar[type[ArtifactParams]] = CountParams

    def __init__(self, builds_log: Path) -> None:
        self.builds_log = builds_log

    def build(
        self, params: ArtifactParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        assert isinstance(params, CountParams)
        with self.builds_log.open("a") as log:
            log.write("built\n")
        numbers = [(params.seed * 31 + i) % 97 for i in range(params.size)]
        (out_dir / "numbers.json").write_text(json.dumps(numbers))
        return {"size": params.size}


class BrokenBuilder(ArtifactBuilder):
    name = "broken"

    def build(
        self, params: ArtifactParams, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        (out_dir / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk on fire\nsecond line")


def test_a_recipe_is_built_once_and_found_again(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    builder = CountBuilder(tmp_path / "builds.log")
    first = store.ensure(builder, store.params(builder, {"seed": 1}))
    again = store.ensure(builder, store.params(builder, {"seed": 1}))
    other = store.ensure(builder, store.params(builder, {"seed": 2}))

    assert (tmp_path / "builds.log").read_text().count("built") == 2
    assert again.path == first.path and other.path != first.path
    assert first.path == store.root / "count" / first.content_hash
    assert first.content_hash == content_hash(first.path)
    metadata = json.loads((first.path / METADATA).read_text())
    assert metadata["params"] == {"seed": 1, "size": 4}
    assert metadata["builder_version"] == "1" and metadata["size"] == 4
    assert metadata["files"] == {"numbers.json": len((first.path / "numbers.json").read_bytes())}


def test_same_bytes_give_the_same_folder_in_two_stores(tmp_path: Path) -> None:
    builder = CountBuilder(tmp_path / "builds.log")
    one, two = ArtifactStore(tmp_path / "a"), ArtifactStore(tmp_path / "b")
    built_one = one.ensure(builder, one.params(builder, {"seed": 5}))
    built_two = two.ensure(builder, two.params(builder, {"seed": 5}))
    assert built_one.content_hash == built_two.content_hash


def test_not_built_says_how_to_build(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    builder = CountBuilder(tmp_path / "builds.log")
    with pytest.raises(ArtifactError, match=r"collobench artifacts build count"):
        store.ensure(builder, store.params(builder, {}), build=False)


def test_bad_params_and_failed_builds_are_one_line_and_leave_nothing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    builder = CountBuilder(tmp_path / "builds.log")
    with pytest.raises(ArtifactError, match=r"^artefact count: size: Input should be greater"):
        store.params(builder, {"size": 0})
    with pytest.raises(ArtifactError, match=r"^artefact count: colour: Extra inputs"):
        store.params(builder, {"colour": "red"})

    broken = BrokenBuilder()
    with pytest.raises(ArtifactError) as raised:
        store.ensure(broken, store.params(broken, {}))
    assert str(raised.value).startswith("artefact broken could not be built: RuntimeError")
    assert not any((tmp_path / "broken").glob(".build-*")), "scratch folder left behind"
    assert store.find(broken, store.params(broken, {})) is None


def _ensure_in_child(root: str, log: str) -> str:
    store = ArtifactStore(Path(root))
    builder = CountBuilder(Path(log))
    return str(store.ensure(builder, store.params(builder, {"seed": 9})).path)


@pytest.mark.spawns
def test_concurrent_workers_share_one_build(tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        paths = pool.starmap(_ensure_in_child, [(str(tmp_path / "s"), str(log))] * 3)
    assert len(set(paths)) == 1
    assert log.read_text().count("built") == 1


def test_unknown_artefact_lists_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    only_count = registry.ArtifactRegistry()
    only_count.register(CountBuilder(Path("unused")))
    monkeypatch.setattr(registry, "ARTIFACTS", only_count)
    with pytest.raises(ArtifactError, match=r"unknown artefact 'nope'; known: count"):
        registry.ensure_artifact("nope")


@pytest.mark.spawns
def test_cli_build_errors_are_one_line_with_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stages.cli", "artifacts", "build", "nope"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("unknown artefact 'nope'")

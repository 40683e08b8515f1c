"""The artefact store: build once per recipe, keep by content hash, find again by recipe.

A recipe is an artefact name, its builder version and its parameters (seed included). The first
`ensure` of a recipe builds into a temporary folder, hashes every file it wrote (sha256 over
relative paths and bytes, `metadata.json` excepted), and renames the folder to
`<name>/<content-hash>/`; a small pointer file `<name>/recipes/<recipe-hash>` leads from the
recipe to that folder. Builders are deterministic for a recipe, so two builds give one hash
(a test checks it). A file lock per recipe lets collocated workers that need the same artefact
wait for one build instead of racing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from stages import settings
from stages.contracts.errors import InvalidInputError

METADATA = "metadata.json"
RECIPES = "recipes"


class ArtifactError(InvalidInputError):
    """An artefact is unknown, cannot be built, or its parameters are invalid (one line)."""


class ArtifactParams(BaseModel):
    """Base of builder parameter models: strict, like spec configs."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class BuiltArtifact:
    """A built artefact: its folder and its metadata."""

    name: str
    path: Path
    content_hash: str
    metadata: Mapping[str, Any]


ParamsT = TypeVar("ParamsT", bound=ArtifactParams)


class ArtifactBuilder(ABC, Generic[ParamsT]):
    """Builds one kind of artefact. Subclasses name their parameters model once, as the type
    argument (`class DigitsBuilder(ArtifactBuilder[DigitsParams])`, which sets `params_model`),
    set `name` and `version`, and write their files into `out_dir`; they import torch and
    friends inside `build`."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    """Bump when the builder's output changes for the same parameters."""
    kind: ClassVar[str] = "dataset"  # dataset | model
    params_model: ClassVar[type[ArtifactParams]] = ArtifactParams
    description: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is ArtifactBuilder:
                (model,) = get_args(base)
                if isinstance(model, type) and issubclass(model, ArtifactParams):
                    cls.params_model = model

    def dependencies(self, params: ParamsT) -> list[tuple[str, dict[str, Any]]]:
        """Artefacts this one is built from (name, params); built first, recorded in metadata."""
        return []

    @abstractmethod
    def build(
        self, params: ParamsT, out_dir: Path, inputs: Mapping[str, BuiltArtifact]
    ) -> dict[str, Any]:
        """Write the artefact's files into `out_dir`; return metadata (shape, size, source,
        accuracy where known). `inputs` holds the built `dependencies()` by name. Seed,
        parameters and builder version are added by the store."""


DependencyResolver = Callable[[str, Mapping[str, Any]], "BuiltArtifact"]
"""Builds (or finds) the artefact `name` with these parameters: how a store gets a builder's
dependencies."""


def _dependencies(
    builder: ArtifactBuilder[Any], params: ArtifactParams, dependency: DependencyResolver | None
) -> dict[str, BuiltArtifact]:
    """What `builder.dependencies()` names, each built (or found) by `dependency`."""
    wanted = builder.dependencies(params)
    if wanted and dependency is None:
        raise ArtifactError(
            f"artefact {builder.name} is built from {', '.join(n for n, _ in wanted)}: "
            "build it through stages.artifacts.registry.ensure_artifact"
        )
    return {name: dependency(name, p) for name, p in wanted} if dependency else {}


def recipe_of(builder: ArtifactBuilder[Any], params: ArtifactParams) -> dict[str, Any]:
    return {
        "name": builder.name,
        "builder_version": builder.version,
        "params": params.model_dump(mode="json"),
    }


def recipe_hash(recipe: Mapping[str, Any]) -> str:
    text = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def content_hash(folder: Path, skip: Collection[str] = (METADATA,)) -> str:
    """sha256 over every file's relative path and bytes, in path order, the relative names in
    `skip` left out (an artefact's own `metadata.json` by default)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative in skip:
            continue
        digest.update(relative.encode() + b"\0")
        update_with_file(digest, path)
        digest.update(b"\0")
    return digest.hexdigest()


def update_with_file(digest: Any, path: Path) -> None:
    """Feed a file's bytes to a hashlib digest, a megabyte at a time."""
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created) for the `with` block: one process at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def single_thread_torch(seed: int | None = None) -> Iterator[Any]:
    """torch on one intra-op thread (bitwise-reproducible reductions: the same float sums in
    the same order each time), seeded; the process's thread count is restored afterwards
    (builds may run inside a test or a worker). Yields the torch module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if seed is not None:
            torch.manual_seed(seed)
        yield torch
    finally:
        torch.set_num_threads(threads)


class ArtifactStore:
    """Artefacts under one root folder (default `$COLLOBENCH_HOME/artifacts`)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else settings.artifacts_dir()

    def params(
        self, builder: ArtifactBuilder[Any], params: Mapping[str, Any] | None
    ) -> ArtifactParams:
        try:
            return builder.params_model.model_validate(dict(params or {}))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "params"
            raise ArtifactError(f"artefact {builder.name}: {where}: {first['msg']}") from None

    def find(self, builder: ArtifactBuilder[Any], params: ArtifactParams) -> BuiltArtifact | None:
        """The built artefact of this recipe, or None when it has not been built here."""
        pointer = self.root / builder.name / RECIPES / recipe_hash(recipe_of(builder, params))
        try:
            digest = pointer.read_text().strip()
        except FileNotFoundError:
            return None
        folder = self.root / builder.name / digest
        try:
            metadata = json.loads((folder / METADATA).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None  # removed by hand, or half-written: build again
        return BuiltArtifact(builder.name, folder, digest, metadata)

    def ensure(
        self,
        builder: ArtifactBuilder[Any],
        params: ArtifactParams,
        *,
        build: bool = True,
        dependency: DependencyResolver | None = None,
    ) -> BuiltArtifact:
        """The artefact of this recipe, built now if needed (`build=False`: raise instead).
        `dependency` builds what `builder.dependencies()` names (the registry passes its own
        `ensure_artifact`, so the store, a plain content-addressed cache, knows no registry)."""
        found = self.find(builder, params)
        if found is not None:
            return found
        if not build:
            raise ArtifactError(
                f"artefact {builder.name} is not built; build it with "
                f"`collobench artifacts build {builder.name}`"
            )
        recipe = recipe_of(builder, params)
        digest_of_recipe = recipe_hash(recipe)
        with locked(self.root / builder.name / RECIPES / f".{digest_of_recipe}.lock"):
            found = self.find(builder, params)  # another process built it while we waited
            if found is not None:
                return found
            return self._build(builder, params, recipe, digest_of_recipe, dependency)

    def _build(
        self,
        builder: ArtifactBuilder[Any],
        params: ArtifactParams,
        recipe: dict[str, Any],
        digest_of_recipe: str,
        dependency: DependencyResolver | None,
    ) -> BuiltArtifact:
        dependencies = _dependencies(builder, params, dependency)
        folder = self.root / builder.name
        folder.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
        try:
            try:
                extra = builder.build(params, scratch, dependencies)
            except ArtifactError:
                raise
            except Exception as error:  # one line, never a traceback wall
                raise ArtifactError(
                    f"artefact {builder.name} could not be built: {type(error).__name__}: {error}"
                ) from error
            digest = content_hash(scratch)
            metadata = {
                **recipe,
                "kind": builder.kind,
                "content_hash": digest,
                "dependencies": {
                    name: {"content_hash": built.content_hash, "path": str(built.path)}
                    for name, built in dependencies.items()
                },
                "build_seconds": round(time.monotonic() - started, 3),
                "files": {
                    p.relative_to(scratch).as_posix(): p.stat().st_size
                    for p in sorted(scratch.rglob("*"))
                    if p.is_file()
                },
                **extra,
            }
            (scratch / METADATA).write_text(json.dumps(metadata, indent=2, sort_keys=True))
            target = folder / digest
            if target.exists():
                shutil.rmtree(scratch)  # same bytes already here (another recipe built them)
            else:
                os.rename(scratch, target)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        pointer = folder / RECIPES / digest_of_recipe
        pointer.parent.mkdir(parents=True, exist_ok=True)
        temporary = pointer.with_name(pointer.name + ".tmp")
        temporary.write_text(digest + "\n")
        os.replace(temporary, pointer)
        return BuiltArtifact(
            builder.name, target, digest, json.loads((target / METADATA).read_text())
        )

"""A model a user brings without code: one spec entry naming a model folder or file, where a
model stage otherwise takes a model name.

    model: {onnx: models/digits.onnx}
    model: {torch_export: digits.pt2}
    model: {torchscript: digits.ts}
    model: {weights: resnet18.safetensors, arch: resnet18, labels: [3, 1, 4]}
    model: {path: my-finetuned-bert/}          # a local Hugging Face folder
    model: {onnx: artifact:digits_cnn_onnx}    # a model file artefact built here

Exactly one location key. A relative location is relative to the spec file's folder, and the
resolved file must lie under the spec's folder, the artefact store or a folder listed in
`COLLOBENCH_MODEL_ROOTS` (`model_roots`). The content's sha256 (`content_sha256`, a folder's
over its files) is filled into the entry's normal form, and the spec hash covers that content
instead of the location: a changed model is a different benchmark, a moved one is not. A spec
may pin `sha256` itself; a file whose content differs is then refused. An `artifact:<name>`
location is a model file artefact of the store, named and hashed by its recipe as a named model
is, and resolved where it runs (stages.library.models.loaders).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from stages import settings
from stages.artifacts.store import content_hash, update_with_file
from stages.spec.base import StrictModel

MODEL_ROOTS_ENV = "COLLOBENCH_MODEL_ROOTS"
"""os.pathsep-separated folders model files may also lie in."""
ALLOW_REMOTE_CODE_ENV = "COLLOBENCH_ALLOW_REMOTE_CODE"
"""Set to 1 (with `trust_remote_code: true` in the entry) to run a folder's own model code."""

ARTIFACT_PREFIX = "artifact:"
"""A location `artifact:<name>` names a model file artefact of this store (e.g.
`artifact:digits_cnn_onnx`): built when first needed, its file found from its metadata."""
ModelFormat = Literal["hf_folder", "onnx", "torch_export", "torchscript", "torchvision_weights"]
LOCATION_FORMATS: dict[str, ModelFormat] = {
    "path": "hf_folder",
    "onnx": "onnx",
    "torch_export": "torch_export",
    "torchscript": "torchscript",
    "weights": "torchvision_weights",
}
"""Location key -> the format it names; an entry has exactly one of them."""


def onnx_execution_provider(device: str) -> str:
    """The ONNX Runtime execution provider an `onnx` entry runs on for a pipeline's device:
    CUDA on a cuda device, the CPU otherwise (never a silent fallback: the stage refuses to
    start when the provider is missing, so the manifest's record is what ran)."""
    return "CUDAExecutionProvider" if device.startswith("cuda") else "CPUExecutionProvider"


class ModelEntry(StrictModel):
    """A model folder or file a model stage runs instead of a named model."""

    path: str | None = Field(
        None,
        description="A local Hugging Face model folder (config, weights, and a tokenizer or "
        "image processor), loaded offline with the Auto class of the stage's task.",
    )
    onnx: str | None = Field(
        None, description="An ONNX file, run by ONNX Runtime on the pipeline's device."
    )
    torch_export: str | None = Field(
        None, description="A program saved by `torch.export.save` (`.pt2`)."
    )
    torchscript: str | None = Field(None, description="A module saved by `torch.jit.save`.")
    weights: str | None = Field(
        None,
        description="Weights of the torchvision architecture `arch`: a safetensors file or a "
        "state dict (read with `weights_only`; a pickled full model is refused).",
    )
    arch: str | None = Field(
        None, description="The torchvision architecture of `weights` (e.g. resnet18)."
    )
    labels: str | list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        description="Model output index -> dataset label, for a model whose classes are not "
        "the dataset's: a file (a JSON list, or one integer per line) or an inline list.",
    )
    trust_remote_code: bool = Field(
        False,
        description="Run a `path` folder's own model code; also needs "
        f"{ALLOW_REMOTE_CODE_ENV}=1 in the environment.",
    )
    sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="The content's sha256 (a folder's: over its files' relative paths and "
        "bytes). Filled in by collobench; given in a spec, it pins the content.",
    )

    @model_validator(mode="after")
    def _one_location(self) -> ModelEntry:
        given = [key for key in LOCATION_FORMATS if getattr(self, key) is not None]
        if len(given) != 1:
            keys = ", ".join(f"`{key}`" for key in LOCATION_FORMATS)
            found = ", ".join(given) or "none"
            raise ValueError(f"give exactly one of {keys} (found: {found})")
        if (self.arch is None) != (self.weights is None):
            raise ValueError("`arch` goes with `weights`, and `weights` needs `arch`")
        if self.trust_remote_code and self.path is None:
            raise ValueError("`trust_remote_code` applies to a `path` folder only")
        return self

    @property
    def location_key(self) -> str:
        """The one location key given (`onnx`, `path`, ...)."""
        return next(key for key in LOCATION_FORMATS if getattr(self, key) is not None)

    @property
    def location(self) -> str:
        """The folder or file named, as written (or resolved, after `with_location`)."""
        value = getattr(self, self.location_key)
        assert isinstance(value, str)
        return value

    @property
    def artifact_name(self) -> str | None:
        """The artefact an `artifact:<name>` location names (built here, found by recipe like
        a named model), else None."""
        location = self.location
        return (
            location.removeprefix(ARTIFACT_PREFIX) if location.startswith(ARTIFACT_PREFIX) else None
        )

    @property
    def format(self) -> ModelFormat:
        return LOCATION_FORMATS[self.location_key]

    def with_location(self, location: str) -> ModelEntry:
        """The same entry naming `location` instead (a resolved absolute path)."""
        return self.model_copy(update={self.location_key: location})


def remote_code_allowed() -> bool:
    """Whether this environment lets a `path` folder's own model code run
    (`COLLOBENCH_ALLOW_REMOTE_CODE=1`); an entry must also ask with `trust_remote_code: true`."""
    return os.environ.get(ALLOW_REMOTE_CODE_ENV, "").strip() == "1"


def model_roots(spec_dir: Path) -> list[Path]:
    """Where model files may lie: the spec's folder, the artefact store and each folder in
    `$COLLOBENCH_MODEL_ROOTS`, symlinks resolved."""
    extra = [part for part in os.environ.get(MODEL_ROOTS_ENV, "").split(os.pathsep) if part]
    roots = [spec_dir, settings.artifacts_dir(), *(Path(part) for part in extra)]
    return [root.expanduser().resolve() for root in roots]


def onnx_external_files(path: Path) -> list[Path]:
    """The external data files an ONNX file's initializers name (the weights an exporter
    wrote beside it, `model.onnx.data`), resolved against its folder; [] for any other file
    (and for a file onnx cannot read: loading it says why)."""
    if path.suffix != ".onnx" or not path.is_file():
        return []
    stat = path.stat()
    return list(_onnx_external_files(str(path), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _onnx_external_files(location: str, size: int, mtime_ns: int) -> tuple[Path, ...]:
    """The parse itself, once per file version (size and mtime key the cache): a graph with
    its weights inside is read whole, so a sensor tick or a second validation must not."""
    path = Path(location)
    try:
        import onnx

        graph = onnx.load(location, load_external_data=False).graph
    except Exception:  # not ONNX
        return ()
    names: set[str] = set()
    for tensor in graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            names.update(entry.value for entry in tensor.external_data if entry.key == "location")
    return tuple((path.parent / name).resolve() for name in sorted(names))


def content_sha256(location: Path) -> str:
    """sha256 of a file's bytes (an ONNX file's with its external data files, by name and
    bytes, after it), or of a folder's files (`stages.artifacts.store.content_hash`, nothing
    left out). Cached per location and the size and modification time of each file, so a run
    does not read a large model twice."""
    if location.is_file():
        files = [location, *onnx_external_files(location)]
    else:
        files = sorted(location.rglob("*"))
    stamps = []
    for path in files:
        if path.is_file():
            stat = path.stat()
            stamps.append((str(path), stat.st_size, stat.st_mtime_ns))
    return _content_sha256(str(location), tuple(stamps))


@functools.lru_cache(maxsize=64)
def _content_sha256(location: str, stamps: tuple[tuple[str, int, int], ...]) -> str:
    """The hash itself; `stamps` (each file's path, size and mtime) key the cache, and for a
    file name the external data files hashed after it."""
    root = Path(location)
    if not root.is_file():
        return content_hash(root, skip=())
    digest = hashlib.sha256()
    update_with_file(digest, root)
    for name, _, _ in stamps[1:]:
        digest.update(Path(name).name.encode())
        update_with_file(digest, Path(name))
    return digest.hexdigest()


MAX_LABELS_BYTES = 1 << 20
"""Largest `labels` file read (a million-class mapping is a mistake)."""


def read_labels(path: Path) -> list[int]:
    """A `labels` file: a JSON list of integers, or one integer per line. ValueError (its
    message one line) when it is neither."""
    if path.stat().st_size > MAX_LABELS_BYTES:
        raise ValueError(f"{path} is over {MAX_LABELS_BYTES} bytes: not a labels file")
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    try:
        values = json.loads(text) if text.startswith("[") else [int(line) for line in text.split()]
    except ValueError as error:
        reason = " ".join(str(error).split())
        raise ValueError(f"{path}: not a JSON list or one integer per line ({reason})") from None
    if not isinstance(values, list) or not all(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in values
    ):
        raise ValueError(f"{path}: labels must be integers >= 0")
    if not values:
        raise ValueError(f"{path}: no labels")
    return values


def is_model_entry(value: Any) -> bool:
    """Whether a config value (in its JSON form) is a model entry, not a model name."""
    return isinstance(value, dict) and any(key in value for key in LOCATION_FORMATS)


def hash_form(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's JSON form as the spec hash sees it: its content's sha256 in place of its
    location (a moved model is the same benchmark; a changed one is not)."""
    if entry.get("sha256") is None:
        return entry
    return {
        key: ("" if key in LOCATION_FORMATS and value else value) for key, value in entry.items()
    }

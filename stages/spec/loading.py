"""Load a spec file safely, apply `--set` overrides, validate it, and hash its normal form."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stages.runtime.registry import default_registry
from stages.spec.checks import SpecProblem, check_spec, one_line, problems_from_validation_error
from stages.spec.models import BenchmarkSpec


class SpecError(Exception):
    """A spec cannot be used; `problems` holds one readable line each."""

    def __init__(self, problems: list[SpecProblem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        prefix = f"{one_line(self.source)}: " if self.source else ""
        return [f"{prefix}{problem}" for problem in self.problems]


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with its normal form (defaults filled in) and that form's hash."""

    spec: BenchmarkSpec
    normalized: dict[str, Any]
    spec_hash: str
    source: str
    overrides: tuple[str, ...] = ()
    """The `--set path=value` overrides applied on top of the file, as given (the manifest
    records them; `normalized` holds their result)."""


def _parse_override(text: str) -> tuple[list[str], Any]:
    path_text, sep, value_text = text.partition("=")
    if not sep or not path_text.strip():
        raise SpecError([SpecProblem("--set", f"expected path=value, got {text!r}")])
    path = [part for part in path_text.strip().replace("[", ".").replace("]", "").split(".")]
    if any(not part for part in path):
        raise SpecError([SpecProblem("--set", f"malformed path {path_text!r}")])
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError as error:
        raise SpecError([SpecProblem(f"--set {path_text}", f"bad value: {error}")]) from None
    return path, value


def apply_override(document: dict[str, Any], text: str) -> None:
    """Set one value in the raw document: `pipelines.0.loadgen.rate=100`; list items may also be
    named by their `name`/`id` (`pipelines.classify.stages.model.config.batch_size=8`)."""
    path, value = _parse_override(text)
    node: Any = document
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        where = ".".join(path[: depth + 1])
        if isinstance(node, list):
            index = _list_index(node, key)
            if index is None:
                raise SpecError([SpecProblem(f"--set {where}", f"no list item {key!r}")])
            if last:
                node[index] = value
            else:
                node = node[index]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        else:
            raise SpecError([SpecProblem(f"--set {where}", "cannot descend into a scalar")])


def _list_index(items: list[Any], key: str) -> int | None:
    if key.lstrip("-").isdigit():
        index = int(key)
        return index if -len(items) <= index < len(items) else None
    for index, item in enumerate(items):
        if isinstance(item, dict) and key in (item.get("name"), item.get("id")):
            return index
    return None


def read_document(path: Path) -> dict[str, Any]:
    """Read YAML with `safe_load` (no object construction from tags)."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([SpecProblem("", "file not found")], source) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as error:
        raise SpecError([SpecProblem("", f"cannot read: {error}")], source) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError([SpecProblem(where, f"invalid YAML: {problem}")], source) from None
    if not isinstance(document, dict):
        raise SpecError(
            [SpecProblem("", f"a spec is a YAML mapping, got {type(document).__name__}")],
            source,
        )
    return document


def validate_document(document: dict[str, Any], source: str = "") -> LoadedSpec:
    """Validate a raw document; raises `SpecError` listing every problem found."""
    try:
        spec = BenchmarkSpec.model_validate(document)
    except ValidationError as error:
        raise SpecError(
            problems_from_validation_error(error, model=BenchmarkSpec), source
        ) from None
    problems = check_spec(spec)
    if problems:
        raise SpecError(problems, source)
    normalized = normalize(spec)
    return LoadedSpec(spec, normalized, spec_hash(normalized), source)


def load_spec(path: Path | str, overrides: list[str] | tuple[str, ...] = ()) -> LoadedSpec:
    """Read, override, validate and hash a spec file."""
    path = Path(path)
    document = read_document(path)
    try:
        for text in overrides:
            apply_override(document, text)
    except SpecError as error:
        raise SpecError(error.problems, str(path)) from None
    return dataclasses.replace(validate_document(document, str(path)), overrides=tuple(overrides))


def normalize(spec: BenchmarkSpec) -> dict[str, Any]:
    """The spec with every default filled in, stage configs included: the input of the hash."""
    registry = default_registry()
    document = spec.model_dump(mode="json")
    for pipeline_doc, pipeline in zip(document["pipelines"], spec.pipelines, strict=True):
        for stage_doc, stage in zip(pipeline_doc["stages"], pipeline.stages, strict=True):
            config_model = registry.get(stage.type).config_model
            stage_doc["config"] = config_model.model_validate(stage.config).model_dump(mode="json")
    return document


def spec_hash(normalized: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the normal form: equal specs hash equal."""
    canonical = json.dumps(normalized, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()

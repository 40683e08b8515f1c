"""Load a spec file safely, apply `--set` overrides, validate it, and hash its normal form."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml.composer import ComposerError

from stages.contracts.errors import InvalidInputError
from stages.runtime.registry import default_registry
from stages.spec.model_entry import hash_form, is_model_entry
from stages.spec.models import BenchmarkSpec
from stages.spec.problems import SpecProblem, one_line, problems_from_validation_error
from stages.validation.checks import check_spec
from stages.validation.image_fit import check_image_fit
from stages.validation.paths import (
    check_file_paths,
    check_model_entries,
    spec_folder,
    with_model_contents,
)
from stages.validation.prompt_counting import follow_prompt_apis

MAX_BYTES_ENV = "COLLOBENCH_SPEC_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 20
"""Largest spec file (and `--set` value) read: 1 MiB unless `$COLLOBENCH_SPEC_MAX_BYTES` says
otherwise; a real spec is a few KiB, so anything near this is a mistake or an attack."""
MAX_ALIASES = 100
"""Most YAML alias uses (`*name`) in one document: enough for shared loadgen blocks, too few
for a "billion laughs" document, whose aliases multiply once the tree is walked."""
MAX_NODES = 100_000
"""Most values in one document once aliases are expanded: ten anchors of ten aliases each stay
under MAX_ALIASES yet expand to 10^10 values when validated or hashed."""
MAX_DEPTH = 64
"""Deepest nesting of YAML collections: a spec is about 6 levels deep; thousands of levels would
exhaust Python's recursion limit in the composer (a traceback instead of a one-line error)."""


MAX_OVERRIDE_PATH_CHARS = 256
"""Longest `--set` path (`pipelines.0.loadgen.rate` is 24): it is echoed in problem lines."""


class SpecError(InvalidInputError):
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


def max_spec_bytes() -> int:
    """`$COLLOBENCH_SPEC_MAX_BYTES` as a positive integer, else 1 MiB (a bad value is an input
    error naming the variable)."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError([SpecProblem(MAX_BYTES_ENV, f"{raw!r} is not a number of bytes >= 1")])
    return int(raw)


class LimitedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader (plain data only: no `!!python/...` objects) that also refuses more
    than MAX_ALIASES alias uses and nesting deeper than MAX_DEPTH, while composing (before any
    value is built)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                # types-PyYAML leaves Parser.peek_event unannotated (pyproject's mypy notes).
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"more than {MAX_ALIASES} aliases (*name)", mark)
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_ids: set[int]) -> int:
    """Values under `node` with every alias expanded (memoised per node, so the walk itself is
    linear); a node that contains itself (`&a [*a]`) is an error."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_ids:
        raise ComposerError(None, None, "an alias refers to its own anchor", node.start_mark)
    open_ids.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, open_ids) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for name, child in node.value:
            size += _expanded_size(name, sizes, open_ids) + _expanded_size(child, sizes, open_ids)
    open_ids.discard(key)
    if size > MAX_NODES:
        raise ComposerError(
            None, None, f"more than {MAX_NODES} values once aliases are expanded", node.start_mark
        )
    sizes[key] = size
    return size


def safe_yaml(text: str) -> Any:
    """Parse one YAML document with LimitedSafeLoader and refuse one whose aliases expand past
    MAX_NODES values. Errors are yaml.YAMLError, or ValueError for a scalar Python refuses to
    build (an integer of more than 4300 digits)."""
    loader = LimitedSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _yaml_problem(error: Exception) -> tuple[str, str]:
    """(where, what) of a YAML error: `line L, column C` when known, and the problem, one line."""
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    lines = str(error).splitlines() or [type(error).__name__]
    problem = getattr(error, "problem", None) or lines[0]
    return where, f"invalid YAML: {problem}"


def _shown(text: str, limit: int = 80) -> str:
    """`text` quoted for a problem line, cut to `limit` characters (an argument may be MBs)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _parse_override(text: str) -> tuple[list[str], Any]:
    limit = max_spec_bytes()
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise SpecError([SpecProblem("--set", f"{_shown(text)} is longer than {limit} bytes")])
    path_text, sep, value_text = text.partition("=")
    if not sep or not path_text.strip():
        raise SpecError([SpecProblem("--set", f"expected path=value, got {_shown(text)}")])
    if len(path_text) > MAX_OVERRIDE_PATH_CHARS:
        raise SpecError([SpecProblem("--set", f"path {_shown(path_text)} is too long")])
    path = [part for part in path_text.strip().replace("[", ".").replace("]", "").split(".")]
    if any(not part for part in path):
        raise SpecError([SpecProblem("--set", f"malformed path {_shown(path_text)}")])
    try:
        value = safe_yaml(value_text) if value_text.strip() else ""
    except (yaml.YAMLError, ValueError) as error:
        where, problem = _yaml_problem(error)
        at = f" ({where})" if where else ""
        raise SpecError([SpecProblem(f"--set {path_text}", f"bad value{at}: {problem}")]) from None
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


def _read_text(path: Path, source: str) -> str:
    """The file's text, refusing what is not a regular file (a FIFO or /dev/zero would block or
    never end) and anything over max_spec_bytes (read at most one byte more)."""
    limit = max_spec_bytes()
    try:
        if not path.is_file():
            reason = "file not found" if not path.exists() else "not a regular file"
            raise SpecError([SpecProblem("", reason)], source)
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = getattr(error, "strerror", None) or str(error)
        raise SpecError([SpecProblem("", f"cannot read: {reason}")], source) from None
    if len(data) > limit:
        raise SpecError(
            [SpecProblem("", f"larger than {limit} bytes (raise {MAX_BYTES_ENV} if it is real)")],
            source,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError([SpecProblem("", f"not UTF-8 text: {error.reason}")], source) from None


def read_document(path: Path) -> dict[str, Any]:
    """Read YAML safely: no object construction from tags (`!!python/object` is an error), at
    most max_spec_bytes, MAX_ALIASES aliases and MAX_DEPTH levels of nesting."""
    source = str(path)
    text = _read_text(path, source)
    try:
        document = safe_yaml(text)
    except (yaml.YAMLError, ValueError) as error:
        where, problem = _yaml_problem(error)
        raise SpecError([SpecProblem(where, problem)], source) from None
    if not isinstance(document, dict):
        raise SpecError(
            [SpecProblem("", f"a spec is a YAML mapping, got {type(document).__name__}")],
            source,
        )
    return document


def validate_document(document: dict[str, Any], source: str = "") -> LoadedSpec:
    """Validate a raw document; raises `SpecError` listing every problem found. Files it names
    must lie inside the allowed roots (stages.validation.paths; relative to the folder of
    `source`)."""
    try:
        spec = BenchmarkSpec.model_validate(document)
    except ValidationError as error:
        raise SpecError(
            problems_from_validation_error(error, model=BenchmarkSpec), source
        ) from None
    spec_dir = spec_folder(source)
    problems = check_spec(spec)
    if not problems:
        spec, problems = follow_prompt_apis(spec)
    if not problems:
        problems = check_file_paths(spec, spec_dir) + check_model_entries(spec, spec_dir)
    if problems:
        raise SpecError(problems, source)
    spec = with_model_contents(spec, spec_dir)
    problems = check_image_fit(spec)
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
    """sha256 of the canonical JSON of the normal form: equal specs hash equal. A model entry
    counts by its content's sha256, not its location (`model_entry.hash_form`)."""
    hashed = copy.deepcopy(normalized)
    for pipeline in hashed.get("pipelines", []):
        for stage in pipeline.get("stages", []):
            config = stage.get("config", {})
            for key, value in config.items():
                if is_model_entry(value):
                    config[key] = hash_form(value)
    canonical = json.dumps(hashed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()

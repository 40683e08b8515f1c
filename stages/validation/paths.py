"""Files a spec names (`loadgen.trace`, stage config fields such as `corpus_path` or
`database`): resolved against the spec's folder and kept inside the allowed roots.

The rule: a relative path is relative to the spec file's folder; after `~` expansion and
symlinks, the file must lie inside the spec's folder, `$COLLOBENCH_HOME`, or a folder listed in
`$COLLOBENCH_ALLOWED_ROOTS` (os.pathsep-separated). So a spec fetched from elsewhere cannot make
a worker read `../../etc/passwd` or `/root/.ssh/id_rsa`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stages import settings
from stages.runtime.registry import default_registry
from stages.spec.model_entry import (
    ALLOW_REMOTE_CODE_ENV,
    ModelEntry,
    content_sha256,
    is_model_entry,
    model_roots,
    onnx_external_files,
    read_labels,
    remote_code_allowed,
)
from stages.spec.models import BenchmarkSpec
from stages.spec.problems import SpecProblem

ALLOWED_ROOTS_ENV = "COLLOBENCH_ALLOWED_ROOTS"


def spec_folder(source: str) -> Path:
    """The folder relative file names in a spec are resolved against: the spec file's, or the
    working directory for a spec that did not come from a file."""
    return Path(source).parent if source and Path(source).is_file() else Path.cwd()


def allowed_roots(spec_dir: Path) -> list[Path]:
    """The spec's folder, `$COLLOBENCH_HOME` and each folder in `$COLLOBENCH_ALLOWED_ROOTS`,
    symlinks resolved."""
    extra = [part for part in os.environ.get(ALLOWED_ROOTS_ENV, "").split(os.pathsep) if part]
    roots: list[Path] = [spec_dir, settings.home(), *(Path(part) for part in extra)]
    return [root.expanduser().resolve() for root in roots]


def resolve_file(value: str, spec_dir: Path) -> Path:
    """`value` as an absolute path, symlinks resolved: relative to `spec_dir`."""
    path = Path(value).expanduser()
    return (path if path.is_absolute() else spec_dir / path).resolve()


def file_fields(spec: BenchmarkSpec) -> Iterator[tuple[str, str, tuple[int, int | None, str]]]:
    """(YAML path, value, (pipeline index, stage index or None, field)) of every file a spec
    names: `loadgen.trace` and the fields each stage config model lists in `file_fields`."""
    registry = default_registry()
    for p, pipeline in enumerate(spec.pipelines):
        if pipeline.loadgen.trace:
            yield f"pipelines[{p}].loadgen.trace", pipeline.loadgen.trace, (p, None, "trace")
        for s, stage in enumerate(pipeline.stages):
            if stage.type not in registry:
                continue  # check_spec reports it
            for name in registry.get(stage.type).config_model.file_fields:
                value = stage.config.get(name)
                if isinstance(value, str):
                    yield f"pipelines[{p}].stages[{s}].config.{name}", value, (p, s, name)


def model_entries(spec: BenchmarkSpec) -> Iterator[tuple[str, ModelEntry, tuple[int, int, str]]]:
    """(YAML path, entry, (pipeline index, stage index, field)) of every model entry a stage
    config holds in one of its `model_entry_fields` (a model name is not an entry)."""
    registry = default_registry()
    for p, pipeline in enumerate(spec.pipelines):
        for s, stage in enumerate(pipeline.stages):
            if stage.type not in registry:
                continue  # check_spec reports it
            for name in registry.get(stage.type).config_model.model_entry_fields:
                value = stage.config.get(name)
                if is_model_entry(value):
                    entry = ModelEntry.model_validate(value)  # the config model validated it
                    yield f"pipelines[{p}].stages[{s}].config.{name}", entry, (p, s, name)


def check_model_entries(spec: BenchmarkSpec, spec_dir: Path) -> list[SpecProblem]:
    """One problem per model entry whose folder or file is missing, of the wrong kind, outside
    the model roots, or not the content its `sha256` pins; and per entry asking to run a
    folder's own code where the environment does not allow it."""
    roots = model_roots(spec_dir)
    problems = []
    for where, entry, _ in model_entries(spec):
        if entry.trust_remote_code and not remote_code_allowed():
            problems.append(
                SpecProblem(
                    f"{where}.trust_remote_code",
                    "running a model folder's own code needs "
                    f"{ALLOW_REMOTE_CODE_ENV}=1 in the environment as well",
                )
            )
        if entry.artifact_name is not None:
            problem = _model_artifact_problem(entry.artifact_name, entry.location_key == "path")
        else:
            problem = _model_location_problem(entry, spec_dir, roots)
        if problem is not None:
            problems.append(SpecProblem(f"{where}.{entry.location_key}", problem))
        if isinstance(entry.labels, str):
            problem = _labels_file_problem(entry.labels, spec_dir, roots)
            if problem is not None:
                problems.append(SpecProblem(f"{where}.labels", problem))
    return problems


def _model_artifact_problem(name: str, folder: bool) -> str | None:
    """Why `artifact:<name>` names no model artefact of the right kind: a `path` entry takes a
    model folder artefact (tiny_lm, minilm), a file entry one with a `model_file`."""
    from stages.artifacts.registry import ARTIFACTS

    def fits(builder: Any) -> bool:
        return builder.kind == "model" and hasattr(builder, "model_file") != folder

    known = sorted(key for key, builder in ARTIFACTS.entries().items() if fits(builder))
    if name not in known:
        kind = "model folder" if folder else "model file"
        return f"no {kind} artefact '{name}'; known: {', '.join(known)}"
    return None


def _labels_file_problem(value: str, spec_dir: Path, roots: list[Path]) -> str | None:
    """Why a `labels` file cannot be read (outside the model roots, missing, malformed)."""
    try:
        resolved = resolve_file(value, spec_dir)
        if not any(resolved.is_relative_to(root) for root in roots):
            return f"{resolved} is outside the model roots (add one with COLLOBENCH_MODEL_ROOTS)"
        read_labels(resolved)
    except (OSError, ValueError, RuntimeError) as error:
        return " ".join(str(error).split())
    return None


def _model_location_problem(entry: ModelEntry, spec_dir: Path, roots: list[Path]) -> str | None:
    try:
        resolved = resolve_file(entry.location, spec_dir)
    except (OSError, ValueError, RuntimeError) as error:
        return f"not a usable path: {error}"
    if not any(resolved.is_relative_to(root) for root in roots):
        shown = ", ".join(str(root) for root in roots)
        return (
            f"{resolved} is outside the model roots ({shown}; add one with COLLOBENCH_MODEL_ROOTS)"
        )
    wants_folder = entry.location_key == "path"
    if not resolved.exists():
        return f"{resolved} does not exist"
    if wants_folder != resolved.is_dir():
        return f"{resolved} is not a {'folder' if wants_folder else 'file'}"
    for external in onnx_external_files(resolved):
        if not external.is_file() or not any(external.is_relative_to(root) for root in roots):
            return (
                f"{external}, the external data {resolved.name} names, is missing or outside "
                "the model roots"
            )
    if entry.sha256 is not None and content_sha256(resolved) != entry.sha256:
        return f"{resolved} is not the content `sha256` pins (it has changed)"
    return None


def with_model_contents(spec: BenchmarkSpec, spec_dir: Path) -> BenchmarkSpec:
    """The spec with every model entry's location made absolute, its `sha256` filled in and a
    `labels` file read into its list (after `check_model_entries` passed)."""
    entries = list(model_entries(spec))
    if not entries:
        return spec
    pipelines = [pipeline.model_copy(deep=True) for pipeline in spec.pipelines]
    for _, entry, (p, s, name) in entries:
        if entry.artifact_name is not None:
            continue  # named and hashed by its recipe, resolved where it runs
        resolved = resolve_file(entry.location, spec_dir)
        update: dict[str, object] = {"sha256": content_sha256(resolved)}
        if isinstance(entry.labels, str):  # inlined: the hash counts the mapping, not its file
            update["labels"] = read_labels(resolve_file(entry.labels, spec_dir))
        filled = entry.with_location(str(resolved)).model_copy(update=update)
        stage = pipelines[p].stages[s]
        stage.config = {**stage.config, name: filled.model_dump(mode="json", exclude_defaults=True)}
    return spec.model_copy(update={"pipelines": pipelines})


def service_model_paths(spec: BenchmarkSpec) -> Iterator[tuple[str, str, int]]:
    """(YAML path, value, service index) of every `services[].model.path`."""
    for index, service in enumerate(spec.services):
        if service.model is not None and service.model.path is not None:
            yield f"services[{index}].model.path", service.model.path, index


def check_file_paths(spec: BenchmarkSpec, spec_dir: Path) -> list[SpecProblem]:
    """One problem per file field (service model paths too) that resolves outside the allowed
    roots."""
    roots = allowed_roots(spec_dir)
    problems = []
    named = [(where, value) for where, value, _ in file_fields(spec)]
    named += [(where, value) for where, value, _ in service_model_paths(spec)]
    for where, value in named:
        try:
            resolved = resolve_file(value, spec_dir)
        except (OSError, ValueError, RuntimeError) as error:  # a NUL byte, a symlink loop
            problems.append(SpecProblem(where, f"not a usable path: {error}"))
            continue
        if not any(resolved.is_relative_to(root) for root in roots):
            problems.append(
                SpecProblem(
                    where,
                    f"{value!r} resolves to {resolved}, outside the allowed roots (the spec's "
                    f"folder, $COLLOBENCH_HOME, ${ALLOWED_ROOTS_ENV})",
                )
            )
    return problems


def with_resolved_files(spec: BenchmarkSpec, spec_dir: Path) -> BenchmarkSpec:
    """The spec with every file field made absolute (relative to `spec_dir`), so workers find
    the files whatever their working directory."""
    pipelines = [pipeline.model_copy(deep=True) for pipeline in spec.pipelines]
    for _, value, (p, s, name) in list(file_fields(spec)):
        resolved = str(resolve_file(value, spec_dir))
        pipeline = pipelines[p]
        if s is None:
            pipeline.loadgen = pipeline.loadgen.model_copy(update={name: resolved})
        else:
            pipeline.stages[s].config = {**pipeline.stages[s].config, name: resolved}
    services = [service.model_copy(deep=True) for service in spec.services]
    for _, value, index in service_model_paths(spec):
        model = services[index].model
        assert model is not None  # service_model_paths yields only services with a model path
        services[index].model = model.model_copy(
            update={"path": str(resolve_file(value, spec_dir))}
        )
    return spec.model_copy(update={"pipelines": pipelines, "services": services})

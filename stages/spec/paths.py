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

from stages import settings
from stages.runtime.registry import default_registry
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

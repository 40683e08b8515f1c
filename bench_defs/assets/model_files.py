"""Model files the specs name (`model: {onnx: ...}`): one observable source asset per distinct
resolved file or folder (key `model_files/<name>`, group `model_files`), whose data version is
the content's sha256 (`stages.spec.model_entry.content_sha256`, cached by size and mtime).

The asset is partitioned like `benchmark_run` (`spec_files`): an observation records the hash
for the partitions whose spec names the file, and `benchmark_run` depends on every model-file
asset partition to partition. So when a file's bytes change, only the benchmark partitions that
use it show as stale ("has a new dependency data version"); the others never got a version from
it and stay fresh. (An unpartitioned source asset would make every partition stale.)

`model_files_sensor` observes them: each tick hashes every file (cheap once cached) and requests
one observation run of the files whose hash differs from its cursor (all of them on the first
tick). A missing file is named in the tick's skip reason and requested again once it is back;
observing one by hand fails the run with its path (the last version stays shown).
The files are found when the code location loads: reload it after a spec names a new one.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.core.sensor_interval import sensor_interval_s
from bench_defs.core.specs import spec_files, spec_partitions

MODEL_FILES_GROUP = "model_files"
SENSOR_NAME = "model_files_sensor"


@dataclass(frozen=True)
class ModelFile:
    """One model file or folder the specs name, with every place that names it."""

    name: str
    location: Path
    format: str
    users: tuple[tuple[str, str], ...]
    """(partition key, YAML path of the entry) of every spec entry naming it."""

    @property
    def key(self) -> dg.AssetKey:
        return dg.AssetKey([MODEL_FILES_GROUP, self.name])

    @property
    def partitions(self) -> list[str]:
        return sorted({partition for partition, _ in self.users})


def _entries_of(path: Path) -> list[tuple[str, Path, str]]:
    """(YAML path, resolved location, format) of every model entry of one spec file; nothing
    for a file that is not a spec (the spec sensor and the benchmark step report it). The
    entries' files are not checked here, so a missing one still becomes an asset."""
    from stages.spec.models import BenchmarkSpec
    from stages.validation.loading import SpecError, read_document
    from stages.validation.paths import model_entries, resolve_file

    try:
        spec = BenchmarkSpec.model_validate(read_document(path))
        return [
            (where, resolve_file(entry.location, path.parent), entry.format)
            for where, entry, _ in model_entries(spec)
            if entry.artifact_name is None  # an `artifact:` model is an artefact asset
        ]
    except (SpecError, ValueError, OSError, RuntimeError):
        return []


def _asset_name(location: Path, taken: set[str]) -> str:
    """The file's name made a valid asset key part; a second file of the same name gets the
    first 8 hex digits of its path's sha256 appended."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", location.name) or "model"
    if name in taken:
        name = f"{name}_{hashlib.sha256(str(location).encode()).hexdigest()[:8]}"
    return name


def find_model_files(specs_dir: Path) -> list[ModelFile]:
    """Every distinct model file or folder named by the spec files of `specs_dir` (the folder
    whose files are the `benchmark_run` partitions), in the order first named."""
    found: dict[Path, tuple[str, list[tuple[str, str]]]] = {}
    for partition, path in spec_files(specs_dir).items():
        for where, location, model_format in _entries_of(path):
            found.setdefault(location, (model_format, []))[1].append((partition, where))
    result: list[ModelFile] = []
    taken: set[str] = set()
    for location, (model_format, users) in found.items():
        name = _asset_name(location, taken)
        taken.add(name)
        result.append(ModelFile(name, location, model_format, tuple(users)))
    return result


def observed_version(model_file: ModelFile) -> dg.DataVersion:
    """The file's content sha256 as a data version; a missing file fails with its path and the
    specs naming it."""
    from stages.spec.model_entry import content_sha256

    if not model_file.location.exists():
        named = ", ".join(f"specs/{p}.yaml {where}" for p, where in model_file.users)
        raise dg.Failure(
            description=f"{model_file.location}: no such model file or folder (named by {named})",
            metadata={"path": dg.MetadataValue.path(str(model_file.location))},
            allow_retries=False,
        )
    return dg.DataVersion(content_sha256(model_file.location))


def _metadata(model_file: ModelFile) -> dict[str, dg.RawMetadataValue]:
    return {
        "path": dg.MetadataValue.path(str(model_file.location)),
        "format": model_file.format,
        "named_by": dg.MetadataValue.json(
            [{"spec": p, "entry": where} for p, where in model_file.users]
        ),
    }


def _asset_args(model_file: ModelFile) -> dict[str, Any]:
    return {
        "key": model_file.key,
        "group_name": MODEL_FILES_GROUP,
        "partitions_def": spec_partitions,
        "metadata": _metadata(model_file),
        "description": f"The {model_file.format} model `{model_file.location}` named by "
        f"{', '.join(f'specs/{p}.yaml' for p in model_file.partitions)}; data version = its "
        "content sha256, recorded for those partitions (benchmark_run depends on it).",
    }


def _observe_fn(model_file: ModelFile) -> Callable[[], dg.DataVersionsByPartition]:
    """The observation: the content hash for every partition whose spec names the file."""

    def observe_model_file() -> dg.DataVersionsByPartition:
        version = observed_version(model_file)
        with warnings.catch_warnings():  # DataVersionsByPartition is in beta
            warnings.simplefilter("ignore", dg.BetaWarning)
            return dg.DataVersionsByPartition({p: version for p in model_file.partitions})

    return observe_model_file


def model_file_asset(model_file: ModelFile) -> dg.SourceAsset:
    """The observable source asset of one model file (see the module docstring)."""
    with warnings.catch_warnings():  # observable_source_asset is in beta
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.observable_source_asset(**_asset_args(model_file))(_observe_fn(model_file))


def with_model_file_deps(
    benchmark: dg.AssetsDefinition, files: list[ModelFile]
) -> dg.AssetsDefinition:
    """`benchmark` (benchmark_run) depending also on every model-file asset, partition to
    partition (both are partitioned by spec file); itself when no spec names a model file."""
    if not files:
        return benchmark
    keys = [model_file.key for model_file in files]

    def add_deps(spec: dg.AssetSpec) -> dg.AssetSpec:
        return spec.replace_attributes(deps=[*spec.deps, *keys])

    (mapped,) = dg.map_asset_specs(add_deps, [benchmark])
    assert isinstance(mapped, dg.AssetsDefinition)
    return mapped


def _sensor_tick(files: list[ModelFile], seen: Mapping[str, str]) -> dg.SensorResult:
    """One tick of the sensor: request an observation of every file whose hash is not the one
    in the cursor (`seen`: asset name -> sha256)."""
    from stages.spec.model_entry import content_sha256

    cursor: dict[str, str] = {}
    changed: list[ModelFile] = []
    missing: list[str] = []
    for model_file in files:
        if not model_file.location.exists():
            missing.append(str(model_file.location))
            continue
        cursor[model_file.name] = content_sha256(model_file.location)
        if seen.get(model_file.name) != cursor[model_file.name]:
            changed.append(model_file)
    new_cursor = json.dumps(cursor, sort_keys=True)
    if not changed:
        reason = "no changed model file"
        if missing:
            reason = f"missing model files: {', '.join(missing)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=new_cursor)
    run_key = hashlib.sha256(
        json.dumps({f.name: cursor[f.name] for f in changed}, sort_keys=True).encode()
    ).hexdigest()[:16]
    request = dg.RunRequest(run_key=run_key, asset_selection=[f.key for f in changed])
    return dg.SensorResult(run_requests=[request], cursor=new_cursor)


def model_files_sensor(files: list[ModelFile], assets: list[dg.SourceAsset]) -> dg.SensorDefinition:
    """The sensor that observes `files` (their `assets`) when their content changes."""

    @dg.sensor(
        name=SENSOR_NAME,
        target=dg.AssetSelection.assets(*(asset.key for asset in assets)),
        minimum_interval_seconds=sensor_interval_s(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Observes a model file a spec names when its content sha256 changes, so "
        "the benchmark partitions that use it show as stale.",
    )
    def observe_changed_model_files(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return _sensor_tick(files, json.loads(context.cursor) if context.cursor else {})

    return observe_changed_model_files


@dataclass(frozen=True)
class ModelFileDefinitions:
    """What the code location adds for the model files of one specs folder."""

    files: list[ModelFile]
    assets: list[dg.SourceAsset]
    sensors: list[dg.SensorDefinition]


def model_file_definitions(specs_dir: Path) -> ModelFileDefinitions:
    """The model-file assets of `specs_dir` and their sensor (none when no spec names one)."""
    files = find_model_files(specs_dir)
    assets = [model_file_asset(model_file) for model_file in files]
    sensors = [model_files_sensor(files, assets)] if files else []
    return ModelFileDefinitions(files, assets, sensors)

"""The spec folder as Dagster sees it: one dynamic partition per spec file, the file's content
hash (what the sensor's cursor keeps), which artefacts a spec uses, and the Launchpad overrides.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from bench_defs.core.k8s import k8s_run_tags
from bench_defs.core.pools import Pool, pool_tags
from stages.spec.model_entry import ModelEntry, is_model_entry

SPEC_PARTITIONS = "spec_files"
spec_partitions = dg.DynamicPartitionsDefinition(name=SPEC_PARTITIONS)
"""`benchmark_run` and everything downstream: one partition per `specs/<stem>.yaml`."""

DEFAULT_DEVICE = "cpu"
"""The devices of a Launchpad run's default tags (what its Kubernetes pod requests)."""
SPEC_HASH_TAG = "collobench/spec_file_hash"
MAX_RUNTIME_TAG = "dagster/max_runtime"
"""Dagster's run-monitoring limit (seconds): a run still going after it is marked failed."""
PHASE_MARGIN_S = 120
"""Per phase, beyond its load window: workers loading models, the start barrier, the drain."""
RUN_MARGIN_S = 300
"""Per run: the environment probe, merging the tables, the manifest, MLflow."""

# Stage types that read a dataset artefact (their config has no artefact name).
DATASET_STAGES: dict[str, str] = {
    "dataset.digits": "digits",
    "dataset.fake_images": "fake_images",
    "dataset.prompts": "prompts",
}
# Config keys whose value names an artefact (`model: digits_cnn`, `corpus: rag_corpus`).
ARTIFACT_KEYS = ("model", "corpus")
TORCHVISION_MODEL = "torchvision_model"


def spec_files(folder: Path) -> dict[str, Path]:
    """Partition key (file stem) -> spec file, for every `*.yaml` in the folder."""
    if not folder.is_dir():
        return {}
    return {path.stem: path for path in sorted(folder.glob("*.yaml")) if path.is_file()}


def file_hash(path: Path) -> str:
    """sha256 of the file's bytes: a changed file is a new benchmark for the sensor."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def artifacts_used(normalized: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """The artefacts (builder names) a normalised spec's stages use: the dataset stages' own
    artefact, and every config `model`/`corpus` value that names one; a torchvision model name
    that is not an artefact of its own (`resnet18`) is the `torchvision_model` artefact.

    A declared mapping, kept beside the stage library's names (the library does not expose
    what it builds); a stage type it does not know adds nothing."""
    names = set(known)
    used: set[str] = set()
    for pipeline in normalized.get("pipelines", []):
        for stage in pipeline.get("stages", []):
            stage_type = str(stage.get("type", ""))
            config = stage.get("config") or {}
            if stage_type in DATASET_STAGES:
                used.add(DATASET_STAGES[stage_type])
            for key in ARTIFACT_KEYS:
                value = config.get(key)
                if is_model_entry(value):  # a model entry: `artifact:<name>` names one
                    named = ModelEntry.model_validate(value).artifact_name
                    if named in names:
                        used.add(named)
                elif isinstance(value, str) and value in names:
                    if not (key == "model" and config.get("weights") == "random"):
                        used.add(value)
                elif (
                    key == "model"
                    and isinstance(value, str)
                    and stage_type.startswith("torchvision.")
                    and TORCHVISION_MODEL in names
                ):
                    used.add(TORCHVISION_MODEL)
    return sorted(used)


def devices_of(normalized: Mapping[str, Any], device_override: str | None = None) -> str:
    """The devices a spec's pipelines use, as the run tag spells them (`cpu`, `cpu+cuda:0`);
    a Launchpad `device` override puts every pipeline on that device."""
    if device_override is not None:
        return device_override
    devices = sorted({str(p.get("device", "cpu")) for p in normalized.get("pipelines", [])})
    return "+".join(devices) or DEFAULT_DEVICE


class BenchmarkRunConfig(dg.Config):
    """Launchpad overrides of one benchmark run, applied on top of the spec file to every
    pipeline (as `collobench run --set`); recorded in the manifest (`overrides`) and in the
    materialisation's metadata. Leave a field out to keep the spec's value."""

    rate: float | None = Field(
        default=None, description="Queries per second of every pipeline's load generator."
    )
    duration_s: float | None = Field(
        default=None, description="Load window of every pipeline, in seconds."
    )
    repeats: int | None = Field(
        default=None, description="Independent trials of the whole benchmark."
    )
    device: str | None = Field(
        default=None, description="Device of every pipeline: cpu, cuda or cuda:N."
    )

    def overrides(self, pipelines: int) -> list[str]:
        """The `--set path=value` strings these overrides stand for (pipelines by index)."""
        result: list[str] = []
        if self.repeats is not None:
            result.append(f"repeats={self.repeats}")
        for index in range(pipelines):
            if self.rate is not None:
                result.append(f"pipelines.{index}.loadgen.rate={self.rate:g}")
            if self.duration_s is not None:
                result.append(f"pipelines.{index}.loadgen.duration_s={self.duration_s:g}")
            if self.device is not None:
                result.append(f"pipelines.{index}.device={self.device}")
        return result


@dataclass(frozen=True)
class SpecState:
    """One spec file as the sensor and schedule see it: valid (with its normal form) or not."""

    key: str
    path: Path
    content_hash: str
    normalized: dict[str, Any] | None
    problems: list[str]

    @property
    def valid(self) -> bool:
        return self.normalized is not None


def read_spec_state(key: str, path: Path) -> SpecState:
    """Validate one spec file (safe YAML through stages.validation.loading); never raises for a bad
    file: its problems (one line each) are returned instead."""
    from stages.validation.loading import SpecError, load_spec

    try:
        digest = file_hash(path)
    except OSError as error:
        return SpecState(key, path, "", None, [f"{path}: cannot read: {error.strerror}"])
    try:
        loaded = load_spec(path)
    except SpecError as error:
        return SpecState(key, path, digest, None, error.lines())
    except Exception as error:  # a spec must never crash the sensor
        return SpecState(key, path, digest, None, [f"{path}: {type(error).__name__}: {error}"])
    return SpecState(key, path, digest, loaded.normalized | {"nightly": loaded.spec.nightly}, [])


def phase_count(normalized: Mapping[str, Any]) -> int:
    """How many phases a spec runs (stages.collocation.phase_plan.phases_of, counted): per
    trial one with a single pipeline, else the solo baselines (when asked), the collocated
    phase and the subset phases of sizes 2 .. min(largest, n - 1)."""
    pipelines = len(normalized.get("pipelines", [])) or 1
    repeats = int(normalized.get("repeats", 1))
    if pipelines == 1:
        return repeats
    collocation = normalized.get("collocation") or {}
    largest = {"none": 1, "pairs": 2}.get(str(collocation.get("subsets", "none")), pipelines - 1)
    subsets = sum(math.comb(pipelines, k) for k in range(2, min(largest, pipelines - 1) + 1))
    solo = pipelines if collocation.get("solo_baselines", True) else 0
    return repeats * (solo + 1 + subsets)


def max_runtime_s(normalized: Mapping[str, Any]) -> int:
    """The `dagster/max_runtime` of a benchmark run, from its spec's timeouts:

        phases x (max over pipelines of loadgen.timeout_s + PHASE_MARGIN_S)
        + sum over the services it starts of ready.timeout_s
        + telemetry.idle_baseline_s + RUN_MARGIN_S

    (every phase ends by its longest pipeline timeout, so this bounds a healthy run)."""
    timeouts = [
        float((p.get("loadgen") or {}).get("timeout_s", 120.0))
        for p in normalized.get("pipelines", [])
    ]
    services = [
        float((s.get("ready") or {}).get("timeout_s", 300.0))
        for s in normalized.get("services", [])
        if s.get("type") != "external"
    ]
    idle = float((normalized.get("telemetry") or {}).get("idle_baseline_s", 0.0))
    per_phase = max(timeouts, default=120.0) + PHASE_MARGIN_S
    return math.ceil(phase_count(normalized) * per_phase + sum(services) + idle + RUN_MARGIN_S)


def run_tags(
    devices: str, pool: Pool, normalized: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The tags of a benchmark or capacity run on `devices` in `pool`: the pool and its queue
    (bench_defs/core/pools.py: the instance runs at most the pool's device count at once), with the
    spec's normal form its `dagster/max_runtime` (`max_runtime_s`), and, under
    `$COLLOBENCH_K8S`, the pod configuration (bench_defs/core/k8s.py)."""
    tags = {**pool_tags(pool), **k8s_run_tags(devices, pool)}
    if normalized is not None:
        tags[MAX_RUNTIME_TAG] = str(max_runtime_s(normalized))
    return tags

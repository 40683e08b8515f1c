"""The run manifest (`manifest.json`) as a typed model: what the launcher writes, and what every
reader (the warehouse loader, the run summary, MLflow logging, Dagster) reads through
`Manifest.model_validate` instead of string lookups into a dict.

Reading is lenient where history demands it: every key but `run_id` has a default, because older
manifests lack the keys added since (`seeds`, `timeline`, `phase_order`, `overrides`) and a run
directory cut short before its final manifest is still loadable. Unknown keys are refused in the
parts collobench alone defines (top level, results, timeline, energy, clock, seeds); the spec
and the environment probe keep theirs (the spec is validated in full by stages.spec when a run
starts; the probe records what it finds). The committed `manifest.schema.json` is the
serialization schema: the keys a manifest written today always has (tests/rundir checks it is
current).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stages.contracts.counters import QueryCounters
from stages.contracts.errors import InvalidInputError
from stages.contracts.slo_verdict import SloVerdict
from stages.contracts.warnings import WarningRecord
from stages.rundir.layout import MANIFEST
from stages.rundir.manifest_part import ManifestPart
from stages.rundir.manifest_startup import Startup

FORMAT_VERSION = 1
DEVICE_BUSY = "device_busy"
"""The run status of a run the pre-flight refused (a foreign compute process on its device)."""
SCHEMA_FILE = Path(__file__).with_name("manifest.schema.json")


class ManifestError(InvalidInputError, ValueError):
    """A manifest cannot be read or does not match the model; the message is one line."""


class _Open(BaseModel):
    """A part that records something richer than the readers need (the spec, the probe): the
    fields readers use are typed, the rest kept as they are."""

    model_config = ConfigDict(extra="allow")

    def as_written(self) -> dict[str, Any]:
        """This part as the manifest holds it, without the defaults the model fills in."""
        return self.model_dump(exclude_unset=True)


# ----------------------------------------------------------------------------- the spec


class LoadgenPart(_Open):
    """The parts of a pipeline's `loadgen` that readers use."""

    type: str | None = Field(None, description="Scenario: server, offline, closed_loop, ...")
    slo_ms: float | None = Field(None, description="Latency objective of the verdict, if any.")
    min_queries: int | None = Field(None, description="Fewest measured queries a valid run has.")


class PipelinePart(_Open):
    """One pipeline of the normalized spec."""

    name: str = Field(description="The pipeline's name (unique within the spec).")
    device: str = Field("cpu", description="Where its models run: cpu, cuda, cuda:N.")
    loadgen: LoadgenPart = Field(default_factory=LoadgenPart, description="Its load generator.")


class HostTelemetryPart(_Open):
    enabled: bool = Field(True, description="Whether the host sampler ran.")
    period_ms: float = Field(100.0, description="Host sampling period.")


class GpuTelemetryPart(_Open):
    enabled: bool = Field(True, description="Whether the GPU sampler ran (with a GPU).")
    period_ms: float = Field(50.0, description="GPU sampling period.")


class TelemetryPart(_Open):
    host: HostTelemetryPart = Field(default_factory=HostTelemetryPart)
    gpu: GpuTelemetryPart = Field(default_factory=GpuTelemetryPart)


class SpecPart(_Open):
    """The normalized spec the run ran (stages.spec.models.BenchmarkSpec as JSON, defaults
    filled in); only the fields readers use are typed here."""

    name: str | None = Field(None, description="The spec's name.")
    pipelines: list[PipelinePart] = Field(default_factory=list)
    telemetry: TelemetryPart = Field(default_factory=TelemetryPart)

    def pipeline(self, name: str) -> PipelinePart | None:
        return next((p for p in self.pipelines if p.name == name), None)


# ----------------------------------------------------------------------------- the environment


class GitPart(_Open):
    commit: str | None = Field(None, description="HEAD of the project's checkout.")
    dirty: bool | None = Field(None, description="Uncommitted changes in the checkout.")
    branch: str | None = None


class EnvironmentPart(_Open):
    """What the environment probe (stages.collocation.environment) found; every probe is best
    effort, so any key may be missing or null."""

    hostname: str | None = None
    git: GitPart | None = None
    packages_sha256: str | None = Field(
        None,
        description="sha256 of every installed distribution as sorted `name==version` lines "
        "(names normalised); None in manifests from before it.",
    )
    packages_count: int | None = Field(None, description="How many lines that hash covers.")
    server_programs: dict[str, str | None] | None = Field(
        None,
        description="The Python distribution each of the run's services runs -> its version "
        "here (None: not installed here); services that run no distribution are not listed.",
    )


# ----------------------------------------------------------------------------- run records


class PipelineSeeds(ManifestPart):
    arrivals_by_trial: list[int] = Field(
        description="The arrival schedule's seed of each trial (derived from the spec's seed)."
    )


class Clock(ManifestPart):
    """One reading of both clocks at the start: maps the tables' monotonic times to wall time."""

    monotonic_ns: int
    wall_time_ns: int


class TimelineEntry(BaseModel):
    """A span of the run: a phase's load window, the idle baseline, or harness work (the
    environment probe, the services, calibrations) that must not overlap a load window."""

    model_config = ConfigDict(extra="forbid")

    what: str = Field(
        description="phase | idle | environment_probe | service_start | service_ready | "
        "service_warmup | service_stop | calibration (before or after a phase: its pipelines' "
        "cores measured, stages.telemetry.calibration)"
    )
    trial: int | None = Field(None, description="phase, idle and calibration entries only.")
    phase: str | None = Field(None, description="phase, idle and calibration entries only.")
    pipelines: list[str] | None = Field(None, description="phase and calibration entries only.")
    service: str | None = Field(None, description="service entries only: the service's name.")
    start_ns: int = Field(description="Monotonic clock.")
    end_ns: int | None = Field(None, description="Monotonic clock; None: still running.")


class EnergySources(ManifestPart):
    """Where the energy figures came from, comma-joined when several (None: no energy)."""

    gpu_source: str | None = Field(None, description="nvml_counter | nvml_power")
    host_source: str | None = Field(None, description="rapl | model_estimate")


class _ResultIdentity(ManifestPart):
    """Which pipeline, phase and trial a result row is, and how its worker ended (first in
    the row; the counters follow)."""

    trial: int
    phase: str
    pipeline: str
    status: str = Field("failed", description="ok | failed | timeout | interrupted")
    error: str | None = Field(None, description="Why it failed.")
    traceback: str | None = Field(None, description="The worker's, when it raised.")
    exit_code: int | None = None
    pid: int | None = None


class PipelineResult(QueryCounters, _ResultIdentity):
    """How one pipeline fared in one phase of one trial (the launcher's PipelineOutcome.row()):
    its identity, its counters (stages.contracts.counters, flat in the row), then the rest."""

    model_config = ConfigDict(frozen=False)

    not_issued: int = 0
    stopped_by: str | None = Field(None, description="Why the load generator stopped issuing.")
    summary: dict[str, float] | None = Field(
        None,
        description="The phase's figures from the analysis views "
        "(analysis.reports.headline_figures.headline_metrics); None without the analysis layer.",
    )
    slo_verdict: SloVerdict | None = Field(
        None,
        description="The verdict on the pipeline's slo_ms over every measured query (failures "
        "over the SLO): met (LoadGen's early-stopping rule), missed (its mirror binomial test: "
        "P[Bin(N, 1 - p) >= over-SLO count] < 0.01) or undecided (too few queries to tell); "
        "None without an SLO or without the analysis layer. Its counts are in `summary` "
        "(queries_measured, queries_over_slo, slo_ms, target_percentile).",
    )
    p99_ms: float | None = Field(
        None, exclude=True, description="Older manifests only (before the views' summary)."
    )
    energy_j: float | None = Field(
        None, exclude=True, description="Older manifests only (before the views' summary)."
    )


class ModelRecord(ManifestPart):
    """A model a stage ran from a model entry (a file or folder the user brought)."""

    pipeline: str = Field(description="The pipeline.")
    stage: str = Field(description="The stage's id.")
    format: str = Field(
        description="hf_folder | onnx | torch_export | torchscript | torchvision_weights"
    )
    location: str = Field(
        description="The resolved file or folder, or `artifact:<name>` for a model artefact."
    )
    sha256: str | None = Field(
        None, description="The content's sha256 (None for an artefact: named by its recipe)."
    )
    runtime: str = Field(description="onnxruntime (an `onnx` entry) | torch (the others).")
    execution_provider: str | None = Field(
        None, description="ONNX Runtime's execution provider (onnx only): CPU or CUDA."
    )


class Manifest(ManifestPart):
    """manifest.json: identity, spec, seeds, clocks, timeline, environment and per-pipeline
    results of one run. Written when the run starts (status running) and again at its end."""

    format_version: int = Field(FORMAT_VERSION, description="Version of this layout.")
    run_id: str = Field(description="The run directory's name; the warehouse's key.")
    name: str | None = Field(None, description="The spec's name.")
    host: str | None = Field(
        None,
        description="The host id the run ran on (`COLLOBENCH_HOST_ID`, else the host name); "
        "None in manifests written before issue 21.",
    )
    spec: SpecPart = Field(default_factory=SpecPart, description="The normalized spec.")
    spec_hash: str | None = Field(None, description="sha256 of the normalized spec.")
    spec_source: str | None = Field(None, description="The spec file the run was started from.")
    overrides: list[str] = Field(default_factory=list, description="`--set path=value` given.")
    seed: int = Field(0, description="The spec's seed.")
    seeds: dict[str, PipelineSeeds] = Field(
        default_factory=dict, description="Seeds derived per pipeline."
    )
    clock: Clock | None = Field(None, description="Both clocks read once at the start.")
    phase_order: list[tuple[int, str, list[str]]] = Field(
        default_factory=list, description="(trial, phase, pipelines) in the order they ran."
    )
    timeline: list[TimelineEntry] = Field(
        default_factory=list, description="Load windows, idle baseline and harness work."
    )
    startup: Startup | None = Field(
        None,
        description="The start-up breakdown (stages.collocation.startup); None in manifests "
        "from before issue 42.",
    )
    started_at: str | None = Field(None, description="ISO-8601 wall time, UTC.")
    ended_at: str | None = Field(None, description="ISO-8601 wall time; None while running.")
    status: str | None = Field(
        None,
        description="ok | failed | interrupted | running | device_busy (the pre-flight found a "
        "foreign compute process on a device of the run: nothing was measured)",
    )
    models: list[ModelRecord] = Field(
        default_factory=list,
        description="Every model entry of the spec, as it ran (empty in manifests from before "
        "issue 34, and for a spec with named models only).",
    )
    environment: EnvironmentPart | None = Field(
        None, description="The environment probe's findings; None until it finished."
    )
    energy: EnergySources = Field(
        default_factory=EnergySources, description="Where the energy figures came from."
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="The warnings' messages, one line each (what people and the warehouse's "
        "run_warnings view read); the same as `warning_records`' messages.",
    )
    warning_records: list[WarningRecord] = Field(
        default_factory=list,
        description="The run's warnings as typed records (code, message, details); a manifest "
        "from before them has only `warnings`, read as records of the code their text implies.",
    )
    results: list[PipelineResult] = Field(
        default_factory=list, description="One per (trial, phase, pipeline), in run order."
    )

    @model_validator(mode="before")
    @classmethod
    def _warnings_as_records(cls, data: Any) -> Any:
        """Every warning gets a record: a message of `warnings` without one (an older manifest,
        a hand-added line) becomes one of the code its text implies; `warnings` then lists the
        records' messages."""
        if not isinstance(data, dict):
            return data
        texts = data.get("warnings") or []
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            return data  # not plain text: validation says so
        records = list(data.get("warning_records") or [])
        recorded = {_message_of(record) for record in records}
        records += [WarningRecord.from_text(text) for text in texts if text not in recorded]
        messages = [_message_of(record) for record in records]
        return {**data, "warning_records": records, "warnings": messages}


def _message_of(record: Any) -> Any:
    return record.get("message") if isinstance(record, dict) else getattr(record, "message", None)


def parse_manifest(document: object, source: object = MANIFEST) -> Manifest:
    """A manifest document (parsed JSON) as the model; ManifestError (one line) if it does not
    fit, naming `source` and the first problem."""
    try:
        return Manifest.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "manifest"
        raise ManifestError(
            f"{source}: invalid manifest: {where}: {first['msg']} "
            f"({error.error_count()} problem(s))"
        ) from None


def read_manifest_document(run_dir: Path) -> Any:
    """The run directory's manifest.json as parsed JSON, unvalidated (the warehouse keeps it
    verbatim); ManifestError when it is missing or unreadable."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise ManifestError(f"{run_dir}: no {MANIFEST} (not a collobench run directory)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ManifestError(f"{path}: unreadable manifest ({error})") from error


def read_manifest(run_dir: Path) -> Manifest:
    """The run directory's manifest, validated; ManifestError (one line) otherwise."""
    return parse_manifest(read_manifest_document(run_dir), Path(run_dir) / MANIFEST)


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema of a manifest as written (every key present), as committed in
    stages/rundir/manifest.schema.json."""
    return Manifest.model_json_schema(mode="serialization")


def write_json_schema(path: Path = SCHEMA_FILE) -> None:
    """Regenerate the committed schema file (after a change to the model)."""
    path.write_text(json.dumps(manifest_json_schema(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_json_schema()

"""The run's manifest (`manifest.json`): the dict the launcher writes at the start, after every
phase and at the end, checked against the readers' model (stages.rundir.manifest) before its
atomic write (a killed launcher leaves the last whole one)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.collocation.phase_plan import phases_of
from stages.collocation.results import PipelineOutcome
from stages.contracts.warnings import WarningRecord
from stages.rundir.manifest import FORMAT_VERSION, parse_manifest
from stages.rundir.tables import MANIFEST
from stages.runtime.driver import arrival_seed
from stages.spec.model_entry import onnx_execution_provider
from stages.spec.models import BenchmarkSpec
from stages.validation.loading import LoadedSpec
from stages.validation.paths import model_entries


@dataclass(frozen=True)
class RunState:
    """What the manifest records besides the spec: the run's state at the time of writing."""

    run_id: str
    status: str  # running | ok | failed | interrupted | device_busy
    started_at: str
    ended_at: str | None
    clock: dict[str, int]  # monotonic_ns and wall_time_ns at the start, to map one to the other
    timeline: list[dict[str, Any]]
    environment: dict[str, object] | None
    energy: dict[str, str | None]
    warnings: list[str]
    results: list[PipelineOutcome]
    host: str | None = None  # the host id (stages.settings.host_id)
    startup: dict[str, Any] | None = None  # stages.collocation.startup.StartupClock.record


def manifest_of(loaded: LoadedSpec, spec: BenchmarkSpec, record: RunState) -> dict[str, Any]:
    """The manifest: `loaded` as given, `spec` with its files resolved (what ran)."""
    return {
        "format_version": FORMAT_VERSION,
        "run_id": record.run_id,
        "name": spec.name,
        "host": record.host,
        "spec": loaded.normalized,
        "spec_hash": loaded.spec_hash,
        "spec_source": loaded.source,
        "overrides": list(loaded.overrides),
        "seed": spec.seed,
        "seeds": {
            pipeline.name: {
                "arrivals_by_trial": [
                    arrival_seed(spec.seed, pipeline.name, trial) for trial in range(spec.repeats)
                ],
            }
            for pipeline in spec.pipelines
        },
        "clock": record.clock,
        "phase_order": [
            [trial, phase, [p.name for p in pipelines]]
            for trial, phase, pipelines in phases_of(spec)
        ],
        "timeline": record.timeline,
        "startup": record.startup,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "status": record.status,
        "models": model_records(spec),
        "environment": record.environment,
        "energy": record.energy,
        "warnings": [str.__str__(warning) for warning in record.warnings],
        "warning_records": [WarningRecord.of(warning).model_dump() for warning in record.warnings],
        "results": [outcome.row() for outcome in record.results],
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Replace the run's manifest atomically (a temporary file, then a rename). The text is
    validated as the readers will read it first: a key the model does not know, or a value of
    the wrong type, raises ManifestError here instead of reaching the run directory."""
    text = json.dumps(manifest, indent=2, default=str)
    parse_manifest(json.loads(text), run_dir / MANIFEST)
    temporary = run_dir / (MANIFEST + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, run_dir / MANIFEST)


def model_records(spec: BenchmarkSpec) -> list[dict[str, Any]]:
    """The manifest's `models`: each model entry with its format, resolved location, content
    hash, and the runtime and execution provider it runs on."""
    records = []
    for _, entry, (p, s, _name) in model_entries(spec):
        pipeline = spec.pipelines[p]
        onnx = entry.format == "onnx"
        records.append(
            {
                "pipeline": pipeline.name,
                "stage": pipeline.stages[s].id,
                "format": entry.format,
                "location": entry.location,
                "sha256": entry.sha256,
                "runtime": "onnxruntime" if onnx else "torch",
                "execution_provider": onnx_execution_provider(pipeline.device) if onnx else None,
            }
        )
    return records

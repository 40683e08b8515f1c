"""The pipeline side of `perf/fidelity.py`: the 3-stage pipeline `dataset -> preprocess ->
classify` of a model at a batch size, under one closed-loop client, in this process with
recording on (`pipeline_qps`) and through `collobench run` (`cli_qps`)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from perf import product_path
from perf.common import PeriodicSampler, run_recorded_table
from perf.fidelity_loops import FAKE_DATASET, measured_window, window_qps
from stages.rundir.tables import read_table
from stages.spec.loadgen import loadgen_spec
from stages.spec.models import PipelineSpec, PlacementSpec, StageSpec

SCRIPT = "fidelity"
"""The benchmark these runs belong to (the prefix of their progress lines)."""


def stage_specs(model: str, batch: int, profile_every: int = 0) -> list[StageSpec]:
    """dataset -> preprocess -> classify for `model` at `batch`."""
    if model == "digits_cnn":
        data = StageSpec(
            id="data",
            type="dataset.digits",
            config={"split": "test", "batch_size": batch},
            outputs=["prep"],
        )
        prep_config: dict[str, Any] = {"mean": [0.5], "std": [0.5]}
    else:
        data = StageSpec(
            id="data",
            type="dataset.fake_images",
            config={**FAKE_DATASET, "batch_size": batch},
            outputs=["prep"],
        )
        prep_config = {}  # ImageNet mean and std; no resize
    return [
        data,
        StageSpec(id="prep", type="torchvision.preprocess", config=prep_config, outputs=["model"]),
        StageSpec(
            id="model",
            type="torchvision.classify",
            config={"model": model, "threads": 1, "profile_every": profile_every},
        ),
    ]


def closed_loop_pipeline(
    name: str,
    model: str,
    batch: int,
    window_s: float,
    warmup: int,
    profile_every: int = 0,
    fuse: bool = False,
) -> PipelineSpec:
    """The 3-stage pipeline of `model` at `batch` under one closed-loop client."""
    loadgen = loadgen_spec(
        type="closed_loop",
        concurrency=1,
        duration_s=window_s,
        warmup_queries=warmup,
        timeout_s=window_s * 10 + 60,
    )
    stages = stage_specs(model, batch, profile_every)
    return PipelineSpec(name=name, fuse=fuse, loadgen=loadgen, stages=stages, error_budget=None)


def pipeline_qps(
    model: str,
    batch: int,
    window_s: float,
    warmup: int,
    work: Path,
    profile_every: int = 0,
    fuse: bool = False,
) -> tuple[float, float, dict[str, float]]:
    """Closed-loop queries/s of the 3-stage pipeline, recorded as in a real run; the process's
    CPU time per measured query in microseconds (every thread: stages, load generator,
    recorder), read every 20 ms by a sampler thread and interpolated at the window's ends; and
    each stage's mean service time (finished_ns - started_ns) in microseconds over the measured
    queries: what the stages' own code took, as opposed to the hand-offs between them.
    `fuse`: the three stages in one thread (`fuse: true` on the pipeline)."""
    name = f"{model}-b{batch}" + ("-fused" if fuse else "")
    spec = closed_loop_pipeline(name, model, batch, window_s, warmup, profile_every, fuse=fuse)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    with PeriodicSampler(time.process_time, 0.02, "cpu-sampler") as cpu:
        result, table = run_recorded_table(SCRIPT, spec, run_dir, slack_ns=0)
    if result.status != "ok":
        raise RuntimeError(f"{spec.name}: pipeline {result.status}: {result.error}")
    measured = table.filter(pc.invert(table.column("warmup")))
    ok_count, start_ns, end_ns = measured_window(measured)
    events = read_table(run_dir, "stage_events")
    first_measured = pc.min(measured.column("query_id")).as_py()
    events = events.filter(pc.greater_equal(events.column("query_id"), first_measured))
    service_ns = pc.subtract(events.column("finished_ns"), events.column("started_ns"))
    service_us = {}
    for stage in ("data", "prep", "model"):
        mask = pc.equal(events.column("stage"), stage)
        service_us[stage] = pc.mean(pc.filter(service_ns, mask)).as_py() / 1e3
    at_ns, cpu_s = np.array(cpu.samples, dtype=np.float64).T
    cpu_window_s = float(np.interp(end_ns, at_ns, cpu_s) - np.interp(start_ns, at_ns, cpu_s))
    qps = float(ok_count / ((end_ns - start_ns) / 1e9))
    return qps, cpu_window_s / ok_count * 1e6, service_us


def cli_qps(
    model: str, batch: int, window_s: float, warmup: int, work: Path, cpus: list[int] | None
) -> float:
    """The same closed-loop pipeline as `pipeline_qps`, through `collobench run`, its worker
    on `cpus` with one torch thread: queries/s from its run directory's rows."""
    name = f"{model}-b{batch}-cli"
    spec = closed_loop_pipeline(name, model, batch, window_s, warmup)
    spec = spec.model_copy(update={"placement": PlacementSpec(cpus=cpus, threads=1)})
    place = Path(tempfile.mkdtemp(prefix="cli-", dir=work))
    run_dir = product_path.run_spec(product_path.spec_document(name, [spec]), place, name)
    return window_qps(product_path.measured_queries(run_dir, name))

"""Fidelity of the stage library: does a model measured through collobench run as fast as the
same work in a bare PyTorch loop? And what does operator profiling cost?

Prints ONE JSON line on stdout (progress on stderr). CPU, one torch thread (OMP_NUM_THREADS=1
is set before torch loads, and every classify stage has `threads: 1`).

For each configuration (digits_cnn at batch 1 and 8; resnet18 at batch 1 and 8 on 64x64
images, so a window holds enough queries on these 2-core VMs: resnet18 at 224x224 takes ~12x
longer per image and would only lengthen the run):

- pipeline: a 3-stage pipeline `dataset.* -> torchvision.preprocess -> torchvision.classify`,
  run in this process by `stages.runtime.driver.run_pipeline` with Parquet recording on, as in
  a real run, under a closed-loop load (one client: the next query is issued when the previous
  one completes). Throughput = measured ok queries / (last completion - first measured
  schedule), from the recorded query rows.
- bare: the same work with no harness, in a plain Python loop: the same dataset tensors served
  in a seeded cycling order (`index_select`), the same preprocessing ops, the same model (from
  the same artefact) under `torch.inference_mode()`, argmax and the top-1 count read back as a
  Python int (as the stage grades). Throughput = iterations / wall time.

- fused: the pipeline with `fuse: true`, its three stages in one thread.
- cli: the pipeline through `collobench run` (the product path, a subprocess as users start
  it: `perf/product_path.py`), its worker placed as this process is (`placement.cpus`,
  `threads: 1`); throughput from its run directory's rows, reported as its ratio to the bare
  loop and to the in-process pipeline of the same repeat (the gap between the two paths).

Each repeat runs every configuration's three sides back to back, rotating which side goes
first, so drift on the shared machine hits all; the figure per configuration is the median
over repeats of the per-repeat ratio pipeline / bare (target: >= 0.98, i.e. within 2%; for
digits_cnn at batch 1, a query of ~0.13 ms, >= 0.65, and fused >= 0.78), with
the per-query overhead in microseconds (1/pipeline - 1/bare). Beside it, the same ratio in
process CPU time per query (bare / pipeline), which time stolen by other processes on a shared
machine does not distort; and the pipeline's stage service times, which split its time per
query into the stages' own code and the rest (thread hand-offs, load generator, recording).

Profiling cost: digits_cnn at batch 1 through the pipeline with `profile_every: 10` vs 0,
interleaved the same way; reported as the throughput lost in percent (a profiled query of a
0.13 ms model costs tens of times an unprofiled one: `perf/profiling_cost.py` splits it).

The process (every stage thread, the load generator, the bare loop) is pinned to one core
(`--cpu`, default the last one), as a worker with `placement.cpus: [n]` would be: stage
hand-offs are then same-core thread switches, whose cost is stable, instead of cross-core
wake-ups, which on these VMs vary from ~4 us to ~25 us with what else the machine is doing.
`--cpu -1` leaves the process free on every core.

Backends: the trained digits_cnn through PyTorch, ONNX Runtime and torch.export, each against a
bare loop of its own runtime (`perf/backend_fidelity.py`, reported under `backends`).

`--quick`: shorter windows and fewer repeats (~40 s, and ~90 s for the backends).
"""

from __future__ import annotations

import os

# One intra-op thread for every torch call of this process, stage threads included: set before
# torch is imported anywhere (torch.set_num_threads in the main thread alone does not reach
# threads that OpenMP starts later on every build).
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf import backend_fidelity, common
from perf.common import (
    BackgroundLoad,
    report_header,
    wait_for_quiet,
)
from perf.fidelity_loops import FAKE_IMAGE_SIZE, BareLoop
from perf.fidelity_pipeline import cli_qps, pipeline_qps

SCRIPT = "fidelity"
TARGET_RATIO_MIN = 0.98
SUB_MS_CONFIGS = (("digits_cnn", 1),)
"""A query well under a millisecond (~0.13 ms bare): the thread hand-offs are a large share of
it, so its targets are the hot-path issue's: 0.65x thread per stage, 0.78x fused."""
TARGET_SUB_MS_RATIO_MIN = 0.65
TARGET_SUB_MS_FUSED_RATIO_MIN = 0.78
CONFIGS = (("digits_cnn", 1), ("digits_cnn", 8), ("resnet18", 1), ("resnet18", 8))
PROFILE_EVERY = 10


def log(message: str) -> None:
    common.log(SCRIPT, message)


SIDES = ("pipeline", "fused", "bare", "cli")
"""The sides of one configuration, in the order of the first repeat (each repeat rotates it)."""


@dataclass(frozen=True)
class Setup:
    """One configuration and how each of its windows is run."""

    model: str
    batch: int
    window_s: float
    warmup: int
    work: Path
    cli_cpus: list[int] | None


@dataclass
class ConfigSamples:
    """What the repeats of one configuration measured: per side its queries/s, per in-process
    side its CPU us per query, and the thread-per-stage pipeline's stage service times."""

    rates: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    cpu_us: dict[str, list[float]] = field(
        default_factory=lambda: {"pipeline": [], "fused": [], "bare": []}
    )
    services: list[dict[str, float]] = field(default_factory=list)

    def ratios(self, side: str, against: str) -> list[float]:
        """Per repeat, side's queries/s over against's."""
        return [a / b for a, b in zip(self.rates[side], self.rates[against], strict=True)]

    def cpu_ratios(self) -> list[float]:
        """Per repeat, the bare loop's CPU per query over the pipeline's (1 = no cost)."""
        return [b / p for b, p in zip(self.cpu_us["bare"], self.cpu_us["pipeline"], strict=True)]


def measure_side(side: str, setup: Setup, bare: BareLoop, samples: ConfigSamples) -> None:
    """One window of one side, its figures added to `samples`."""
    if side == "cli":
        rate = cli_qps(
            setup.model, setup.batch, setup.window_s, setup.warmup, setup.work, setup.cli_cpus
        )
        samples.rates[side].append(rate)
        return
    if side == "bare":
        rate, cpu = bare.qps(setup.window_s, setup.warmup)
    else:
        fuse = side == "fused"
        rate, cpu, service_us = pipeline_qps(
            setup.model, setup.batch, setup.window_s, setup.warmup, setup.work, fuse=fuse
        )
        if not fuse:
            samples.services.append(service_us)
    samples.rates[side].append(rate)
    samples.cpu_us[side].append(cpu)


def measure_config(
    model: str,
    batch: int,
    repeats: int,
    window_s: float,
    warmup: int,
    work: Path,
    cli_cpus: list[int] | None,
) -> dict[str, Any]:
    """Interleaved repeats of the pipeline (a thread per stage), the fused pipeline, the bare
    loop and the pipeline through `collobench run` (its worker on `cli_cpus`) for one
    configuration; each repeat starts with a different side."""
    setup = Setup(model, batch, window_s, warmup, work, cli_cpus)
    bare = BareLoop(model, batch)
    samples = ConfigSamples()
    for repeat in range(repeats):
        order = list(SIDES)
        for side in order[repeat % 4 :] + order[: repeat % 4]:
            measure_side(side, setup, bare, samples)
        rates = {side: samples.rates[side][-1] for side in SIDES}
        log(
            f"{model} b{batch} repeat {repeat}: pipeline {rates['pipeline']:.1f} q/s, "
            f"fused {rates['fused']:.1f} q/s, bare {rates['bare']:.1f} q/s, ratio "
            f"{samples.ratios('pipeline', 'bare')[-1]:.4f}, fused "
            f"{samples.ratios('fused', 'bare')[-1]:.4f}, CPU ratio "
            f"{samples.cpu_ratios()[-1]:.4f}, through collobench run {rates['cli']:.1f} q/s "
            f"({samples.ratios('cli', 'bare')[-1]:.4f} of bare)"
        )
    return {**rate_figures(model, batch, samples), **cost_figures(samples)}


def rate_figures(model: str, batch: int, samples: ConfigSamples) -> dict[str, Any]:
    """A configuration's throughput on each side, and each side's ratio to the bare loop."""
    pipeline_median = statistics.median(samples.rates["pipeline"])
    ratios = samples.ratios("pipeline", "bare")
    fused_rates = samples.rates["fused"]
    fused_ratios = samples.ratios("fused", "bare")
    cli_ratios = samples.ratios("cli", "bare")
    cli_gaps = samples.ratios("cli", "pipeline")
    return {
        "model": model,
        "batch": batch,
        "input": "digits 1x8x8" if model == "digits_cnn" else f"fake 3x{FAKE_IMAGE_SIZE}x64",
        "pipeline_qps_median": round(pipeline_median, 2),
        "bare_qps_median": round(statistics.median(samples.rates["bare"]), 2),
        "pipeline_samples_per_s_median": round(pipeline_median * batch, 2),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_min": round(min(ratios), 4),
        "ratio_max": round(max(ratios), 4),
        # The same pipeline with `fuse: true`: the three stages in one thread.
        "fused_qps_median": round(statistics.median(fused_rates), 2),
        "fused_ratio_median": round(statistics.median(fused_ratios), 4),
        "fused_ratio_min": round(min(fused_ratios), 4),
        "fused_ratio_max": round(max(fused_ratios), 4),
        "fused_us_per_query": round(1e6 / statistics.median(fused_rates), 1),
        "fused_cpu_us_per_query": round(statistics.median(samples.cpu_us["fused"]), 1),
        # The pipeline through `collobench run` (the product path): its ratio to the bare loop
        # and to the in-process pipeline, each per repeat.
        "cli_qps_median": round(statistics.median(samples.rates["cli"]), 2),
        "cli_ratio_median": round(statistics.median(cli_ratios), 4),
        "cli_ratio_min": round(min(cli_ratios), 4),
        "cli_ratio_max": round(max(cli_ratios), 4),
        "cli_to_in_process_median": round(statistics.median(cli_gaps), 4),
        "cli_to_in_process_min": round(min(cli_gaps), 4),
        "cli_to_in_process_max": round(max(cli_gaps), 4),
    }


def cost_figures(samples: ConfigSamples) -> dict[str, Any]:
    """A configuration's CPU and time per query, in the pipeline and outside its stages."""
    pipeline_us = 1e6 / statistics.median(samples.rates["pipeline"])
    bare_us = 1e6 / statistics.median(samples.rates["bare"])
    cpu_ratios = samples.cpu_ratios()
    services = samples.services
    service_us = {
        stage: round(statistics.median(s[stage] for s in services), 1) for stage in services[0]
    }
    return {
        # CPU time per query (bare / pipeline, so 1 = no cost, like the throughput ratio):
        # time the process was preempted by other processes does not count, so this one holds
        # on a shared machine where the wall-clock ratio swings.
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 4),
        "cpu_ratio_min": round(min(cpu_ratios), 4),
        "cpu_ratio_max": round(max(cpu_ratios), 4),
        "pipeline_cpu_us_per_query": round(statistics.median(samples.cpu_us["pipeline"]), 1),
        "bare_cpu_us_per_query": round(statistics.median(samples.cpu_us["bare"]), 1),
        "overhead_us_per_query": round(pipeline_us - bare_us, 1),
        "pipeline_us_per_query": round(pipeline_us, 1),
        "bare_us_per_query": round(bare_us, 1),
        # Where a pipeline query's time goes: the stages' own service times, and the rest
        # (hand-offs between stage threads, the load generator's completion -> next issue).
        "stage_service_us": service_us,
        "outside_stages_us_per_query": round(pipeline_us - sum(service_us.values()), 1),
    }


def measure_profiling(repeats: int, window_s: float, warmup: int, work: Path) -> dict[str, Any]:
    """digits_cnn batch 1 with profile_every PROFILE_EVERY vs 0, interleaved."""
    ratios = []
    for repeat in range(repeats):
        order = (PROFILE_EVERY, 0) if repeat % 2 == 0 else (0, PROFILE_EVERY)
        rates = {
            every: pipeline_qps("digits_cnn", 1, window_s, warmup, work, profile_every=every)[0]
            for every in order
        }
        ratios.append(rates[PROFILE_EVERY] / rates[0])
        log(f"profiling repeat {repeat}: profiled / unprofiled {ratios[-1]:.4f}")
    return {
        "profile_every": PROFILE_EVERY,
        "config": "digits_cnn b1 pipeline",
        "throughput_ratio_median": round(statistics.median(ratios), 4),
        "cost_pct": round((1 - statistics.median(ratios)) * 100, 2),
        "note": "throughput with torch.profiler on every Nth query vs off (perf/profiling_cost.py "
        "measures the cost per profiled and per unprofiled query)",
    }


def _ratio_target(config: dict[str, Any]) -> float:
    """A sub-millisecond model's thread-per-stage target, else within 2% of the bare loop."""
    if (config["model"], config["batch"]) in SUB_MS_CONFIGS:
        return TARGET_SUB_MS_RATIO_MIN
    return TARGET_RATIO_MIN


def met(configs: list[dict[str, Any]], backends: list[dict[str, Any]]) -> dict[str, bool]:
    """Each configuration's targets (in process, through the CLI, fused) and each backend's."""
    return {
        **{f"{c['model']}_b{c['batch']}": c["ratio_median"] >= _ratio_target(c) for c in configs},
        **{
            f"{c['model']}_b{c['batch']}_cli": c["cli_ratio_median"] >= _ratio_target(c)
            for c in configs
        },
        **{f"backend_{entry['backend']}": entry["met"] for entry in backends},
        **{
            f"{c['model']}_b{c['batch']}_fused": c["fused_ratio_median"]
            >= TARGET_SUB_MS_FUSED_RATIO_MIN
            for c in configs
            if (c["model"], c["batch"]) in SUB_MS_CONFIGS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (~40 s in all)")
    parser.add_argument(
        "--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="pin to this core; -1: free"
    )
    args = parser.parse_args()
    cli_cpus = [args.cpu] if args.cpu >= 0 else None
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    window_s = 1.0 if args.quick else 3.0
    repeats = 2 if args.quick else 3
    warmup = 20
    import torch

    torch.set_num_threads(1)
    waited_s = wait_for_quiet(SCRIPT, 5.0 if args.quick else 30.0)
    background: dict[str, float] = {}
    configs = []
    with tempfile.TemporaryDirectory(prefix="collobench-fidelity-") as directory:
        work = Path(directory)
        for model, batch in CONFIGS:
            with BackgroundLoad() as load:
                configs.append(
                    measure_config(model, batch, repeats, window_s, warmup, work, cli_cpus)
                )
            background[f"{model}_b{batch}"] = load.pct
        with BackgroundLoad() as load:
            profiling = measure_profiling(repeats, window_s, warmup, work)
        background["profiling"] = load.pct
        # Last: it points this process's COLLOBENCH_HOME at the CLI runs' home.
        with BackgroundLoad() as load:
            backends = backend_fidelity.measure_backends(repeats, window_s, warmup, work, cli_cpus)
        background["backends"] = load.pct
    report = {
        **report_header(SCRIPT, "quick" if args.quick else "full", waited_s, background),
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "window_s": window_s,
        "repeats": repeats,
        "warmup_queries": warmup,
        "load": "closed_loop, concurrency 1, recording on",
        "configs": configs,
        "profiling": profiling,
        # The trained digits_cnn through each backend against a bare loop of that backend
        # (perf/backend_fidelity.py), at batch 32.
        "backends": backends,
        "targets": {
            "ratio_min": TARGET_RATIO_MIN,
            "sub_ms_ratio_min": TARGET_SUB_MS_RATIO_MIN,
            "sub_ms_fused_ratio_min": TARGET_SUB_MS_FUSED_RATIO_MIN,
            "sub_ms_configs": [f"{model}_b{batch}" for model, batch in SUB_MS_CONFIGS],
        },
        "met": met(configs, backends),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

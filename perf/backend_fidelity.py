"""Fidelity per backend: does a model a user brings run through collobench as fast as a bare
loop of the runtime that runs it? The trained digits_cnn three ways, as `specs/byo_model.yaml`
names them: PyTorch (the built-in model), ONNX Runtime (`{onnx: artifact:digits_cnn_onnx}`)
and torch.export (`{torch_export: artifact:digits_cnn_pt2}`).

For each backend, three sides, interleaved and rotated per repeat (drift on the shared machine
hits all): the 3-stage pipeline `dataset.digits -> torchvision.preprocess -> torchvision.classify`
in this process with recording on (`perf/fidelity_pipeline.py`'s `pipeline_qps`); the same pipeline
through `collobench run` (`perf/product_path.py`); and the bare loop of that backend: the same
batches and preprocessing, then the backend's own call (`session.run` on the batch as numpy
for ONNX Runtime, the exported module's forward for torch.export, the nn.Module for PyTorch),
argmax and the top-1 count. Ratio = pipeline / bare per repeat; the figure is the median with
[min, max]; target as `perf/fidelity.py`'s: >= 0.98 at batch 32 (a query of ~1 ms), where the
harness's per-query cost is small next to the model's.

Prints ONE JSON line on stdout (progress on stderr); `perf/fidelity.py` runs it too and reports
it under `backends`. One torch and one ONNX Runtime intra-op thread; the process pinned to one
core (`--cpu`). `--quick`: shorter windows, fewer repeats.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from perf import common, product_path
from perf.common import report_header, run_recorded_table, wait_for_quiet
from perf.fidelity_loops import BareLoop, window_qps
from stages.spec.loadgen import loadgen_spec
from stages.spec.models import PipelineSpec, PlacementSpec, StageSpec

SCRIPT = "backend_fidelity"
BATCH = 32
TARGET_RATIO_MIN = 0.98
BACKENDS: dict[str, Any] = {
    "pytorch": "digits_cnn",
    "onnx": {"onnx": "artifact:digits_cnn_onnx"},
    "torch_export": {"torch_export": "artifact:digits_cnn_pt2"},
}
"""Backend -> the classify stage's `model`, as specs/byo_model.yaml names it."""


def log(message: str) -> None:
    common.log(SCRIPT, message)


def backend_pipeline(backend: str, window_s: float, warmup: int) -> PipelineSpec:
    """digits -> preprocess -> classify through `backend`, one closed-loop client."""
    loadgen = loadgen_spec(
        type="closed_loop",
        concurrency=1,
        duration_s=window_s,
        warmup_queries=warmup,
        timeout_s=window_s * 10 + 60,
    )
    stages = [
        StageSpec(
            id="data",
            type="dataset.digits",
            config={"split": "test", "batch_size": BATCH},
            outputs=["prep"],
        ),
        StageSpec(
            id="prep",
            type="torchvision.preprocess",
            config={"mean": [0.5], "std": [0.5]},
            outputs=["model"],
        ),
        StageSpec(
            id="model",
            type="torchvision.classify",
            config={"model": BACKENDS[backend], "threads": 1},
        ),
    ]
    return PipelineSpec(name=backend, loadgen=loadgen, stages=stages, error_budget=None)


def backend_call(backend: str) -> Any:
    """The backend's own call on a preprocessed batch (a float32 tensor) -> logits tensor."""
    import torch

    from stages.artifacts.registry import ensure_artifact
    from stages.artifacts.vision_artifacts import load_digits_cnn

    if backend == "pytorch":
        return load_digits_cnn(ensure_artifact("digits_cnn"))
    built = ensure_artifact("digits_cnn_onnx" if backend == "onnx" else "digits_cnn_pt2")
    path = str(built.path / built.metadata["model_file"])
    if backend == "torch_export":
        return torch.export.load(path).module()
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(session.run(None, {name: x.numpy()})[0])


def bare_qps(backend: str, window_s: float, warmup: int) -> float:
    """Iterations/s of the bare loop (`fidelity_loops.BareLoop`) with the backend's call."""
    loop = BareLoop("digits_cnn", BATCH)
    loop.model = backend_call(backend)
    return loop.qps(window_s, warmup)[0]


def in_process_qps(backend: str, window_s: float, warmup: int, work: Path) -> float:
    spec = backend_pipeline(backend, window_s, warmup)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    result, table = run_recorded_table(SCRIPT, spec, run_dir, slack_ns=0)
    if result.status != "ok":
        raise RuntimeError(f"{backend}: pipeline {result.status}: {result.error}")
    return window_qps(table.filter(pc.invert(table.column("warmup"))))


def cli_qps(
    backend: str, window_s: float, warmup: int, work: Path, cpus: list[int] | None, repeat: int
) -> float:
    spec = backend_pipeline(backend, window_s, warmup)
    spec = spec.model_copy(update={"placement": PlacementSpec(cpus=cpus, threads=1)})
    document = product_path.spec_document(f"byo-{backend}", [spec])
    run_dir = product_path.run_spec(document, work / "cli", f"byo-{backend}-{repeat}")
    return window_qps(product_path.measured_queries(run_dir, backend))


def measure_backends(
    repeats: int, window_s: float, warmup: int, work: Path, cpus: list[int] | None
) -> list[dict[str, Any]]:
    """Per backend, the interleaved sides' medians and their ratios to the bare loop."""
    # One home for this process and the CLI runs (product_path gives them work/cli/home):
    # the exported artefacts are built once, before any window.
    os.environ["COLLOBENCH_HOME"] = str(work / "cli" / "home")
    for backend in BACKENDS:
        backend_call(backend)
    rates: dict[str, dict[str, list[float]]] = {
        backend: {"pipeline": [], "cli": [], "bare": []} for backend in BACKENDS
    }
    sides = ["pipeline", "cli", "bare"]
    for repeat in range(repeats):
        for backend in BACKENDS:
            for side in sides[repeat % 3 :] + sides[: repeat % 3]:
                if side == "bare":
                    rate = bare_qps(backend, window_s, warmup)
                elif side == "pipeline":
                    rate = in_process_qps(backend, window_s, warmup, work)
                else:
                    rate = cli_qps(backend, window_s, warmup, work, cpus, repeat)
                rates[backend][side].append(rate)
            got = {side: values[-1] for side, values in rates[backend].items()}
            log(
                f"{backend} repeat {repeat}: pipeline {got['pipeline']:.1f} q/s, through "
                f"collobench run {got['cli']:.1f}, bare {got['bare']:.1f}"
            )
    return [_figures(backend, rates[backend]) for backend in BACKENDS]


def _figures(backend: str, rates: dict[str, list[float]]) -> dict[str, Any]:
    pairs = list(zip(rates["pipeline"], rates["cli"], rates["bare"], strict=True))
    ratios = [pipeline / bare for pipeline, _, bare in pairs]
    cli_ratios = [cli / bare for _, cli, bare in pairs]
    return {
        "backend": backend,
        "model": BACKENDS[backend],
        "batch": BATCH,
        "bare_qps_median": round(statistics.median(rates["bare"]), 2),
        "pipeline_qps_median": round(statistics.median(rates["pipeline"]), 2),
        "cli_qps_median": round(statistics.median(rates["cli"]), 2),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_min": round(min(ratios), 4),
        "ratio_max": round(max(ratios), 4),
        "cli_ratio_median": round(statistics.median(cli_ratios), 4),
        "cli_ratio_min": round(min(cli_ratios), 4),
        "cli_ratio_max": round(max(cli_ratios), 4),
        "met": statistics.median(ratios) >= TARGET_RATIO_MIN
        and statistics.median(cli_ratios) >= TARGET_RATIO_MIN,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows, 2 repeats")
    parser.add_argument(
        "--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="pin to this core; -1: free"
    )
    args = parser.parse_args()
    cpus = [args.cpu] if args.cpu >= 0 else None
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    window_s, repeats = (1.0, 2) if args.quick else (3.0, 3)
    import torch

    torch.set_num_threads(1)
    waited_s = wait_for_quiet(SCRIPT, 5.0 if args.quick else 30.0)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="collobench-backends-") as directory:
        backends = measure_backends(repeats, window_s, 20, Path(directory), cpus)
    report = {
        **report_header(SCRIPT, "quick" if args.quick else "full", waited_s, {}),
        "window_s": window_s,
        "repeats": repeats,
        "load": "closed_loop, concurrency 1, recording on",
        "backends": backends,
        "target_ratio_min": TARGET_RATIO_MIN,
        "met": {entry["backend"]: entry["met"] for entry in backends},
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

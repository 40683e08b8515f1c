"""The checks of `make gpu-check` that run `collobench run` on the GPU: the GPU sampler end to
end, MPS, and the shipped model specs on cuda."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.gpu.check import FAIL, OK, SKIP, Check

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
RUN_TIMEOUT_S = 600


def run_cli(spec_path: Path, out_dir: Path, overrides: list[str]) -> tuple[int, str, Path | None]:
    """`collobench run` in a child process; returns exit code, output tail, run directory."""
    command = [
        sys.executable,
        "-m",
        "stages.cli",
        "run",
        str(spec_path),
        "--no-mlflow",
        "--out",
        str(out_dir),
        "--db",
        str(out_dir / "results.duckdb"),
    ]
    for override in overrides:
        command += ["--set", override]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        child = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {RUN_TIMEOUT_S} s", None
    output = (child.stdout + child.stderr).strip()
    run_dirs = sorted(p.parent for p in out_dir.glob("*/manifest.json"))
    return child.returncode, output[-600:], run_dirs[-1] if run_dirs else None


def write_spec(directory: Path, document: dict[str, Any]) -> Path:
    import yaml

    path = directory / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def tiny_spec(name: str, mode: str, duration_s: float = 3.0) -> dict[str, Any]:
    return {
        "name": name,
        "collocation": {"mode": mode, "solo_baselines": False},
        "telemetry": {"gpu": {"period_ms": 50}},
        "pipelines": [
            {
                "name": "gpu",
                "device": "cuda",
                "loadgen": {"type": "server", "rate": 200, "duration_s": duration_s},
                "stages": [{"id": "nothing", "type": "noop"}],
            }
        ],
    }


def check_sampler(work: Path) -> Check:
    import pyarrow.parquet as pq

    code, output, run_dir = run_cli(
        write_spec(work, tiny_spec("gpu-check-sampler", "time_slice")), work / "sampler", []
    )
    if code != 0 or run_dir is None:
        return Check("sampler.end_to_end", FAIL, f"run exited {code}: {output}")
    path = run_dir / "gpu_samples.parquet"
    if not path.exists():
        return Check("sampler.end_to_end", FAIL, f"no gpu_samples.parquet in {run_dir}")
    rows = pq.read_table(path).to_pylist()
    counter_rows = [r for r in rows if r["energy_source"] == "nvml_counter"]
    energies = [r["energy_j"] for r in counter_rows if r["energy_j"] is not None]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    figures = {
        "rows": len(rows),
        "nvml_counter_rows": len(counter_rows),
        "energy_j": round(max(energies) - min(energies), 1) if energies else None,
        "manifest_energy": manifest.get("energy"),
        "run_dir": str(run_dir),
    }
    status = OK if counter_rows and energies and max(energies) > min(energies) else FAIL
    return Check(
        "sampler.end_to_end",
        status,
        f"{len(rows)} gpu_samples rows, {len(counter_rows)} with energy_source nvml_counter, "
        f"{figures['energy_j']} J over the run; manifest energy {manifest.get('energy')}",
        figures,
    )


def check_mps(work: Path) -> Check:
    from stages.collocation_modes.mps import mps_pipe_directory

    control = mps_pipe_directory() / "control"
    code, output, _ = run_cli(
        write_spec(work, tiny_spec("gpu-check-mps", "mps", 2.0)), work / "mps", []
    )
    figures = {"daemon": control.exists(), "exit_code": code}
    if control.exists():
        status = OK if code == 0 else FAIL
        return Check(
            "mps",
            status,
            f"daemon at {control}; tiny mps spec exited {code}: "
            + ("ran" if code == 0 else output),
            figures,
        )
    refused = code == 2 and "MPS control daemon" in output
    detail = (
        "daemon not running, placement refuses as designed"
        if refused
        else f"daemon not running, but the mps spec exited {code}: {output}"
    )
    return Check("mps", OK if refused else FAIL, detail, figures)


def check_model_spec(name: str, work: Path, duration_s: float) -> Check:
    import yaml

    spec_path = REPO_ROOT / "specs" / f"{name}.yaml"
    check_name = f"spec.{name}"
    if not spec_path.exists():
        return Check(check_name, SKIP, f"specs/{name}.yaml does not exist yet")
    document = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    overrides = []
    for pipeline in document.get("pipelines", []):
        overrides.append(f"pipelines.{pipeline['name']}.device=cuda")
        loadgen = pipeline.get("loadgen") or {}
        if float(loadgen.get("duration_s", 10.0)) > duration_s:
            overrides.append(f"pipelines.{pipeline['name']}.loadgen.duration_s={duration_s}")
    for service in document.get("services", []):
        # A served model's server moves to the GPU too (an `external` one is the user's).
        if service.get("type") != "external":
            overrides.append(f"services.{service['name']}.device=cuda")
    if int(document.get("repeats", 1)) > 1:
        overrides.append("repeats=1")
    code, output, run_dir = run_cli(spec_path, work / name, overrides)
    if run_dir is None:
        return Check(check_name, FAIL, f"run exited {code}, no run directory: {output}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    results = []
    for result in manifest.get("results", []):
        summary = result.get("summary") or {}
        results.append(
            {
                "phase": result["phase"],
                "pipeline": result["pipeline"],
                "status": result["status"],
                "error": result.get("error"),
                "p99_ms": summary.get("latency_p99_ms"),
                "queries_per_s": summary.get("queries_per_s"),
            }
        )
    parts = [
        f"{r['pipeline']} {r['phase']} {r['status']} p99 {_ms(r['p99_ms'])} "
        f"{_rate(r['queries_per_s'])}" + (f" ({r['error']})" if r["error"] else "")
        for r in results
    ]
    fine = code == 0 and results and all(r["status"] == "ok" for r in results)
    return Check(
        check_name,
        OK if fine else FAIL,
        f"exit {code}; " + "; ".join(parts),
        {"exit_code": code, "pipelines": results, "run_dir": str(run_dir)},
    )


def _ms(value: Any) -> str:
    return f"{value:.2f} ms" if isinstance(value, int | float) else str(value)


def _rate(value: Any) -> str:
    return f"{value:.1f} q/s" if isinstance(value, int | float) else "- q/s"


# ----------------------------------------------------------------------------- main

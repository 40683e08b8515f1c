"""A stand-in for `collobench capacity` in the Dagster tests (run as `python THIS capacity ...`):
it writes a valid search.json and capacity.json through the contract's models, plus argv.json
(its command line and COLLOBENCH_HOME), so the tests see what the asset passed, and a
report.md and a (header-only) PNG as the real search leaves beside its capacity.json.

Each pipeline's certified capacity comes from `$FAKE_CAPACITY_QPS` (JSON name -> q/s; default
100); a ray certifies s = 0.8. `$FAKE_CAPACITY_OVERRIDES` (JSON) replaces fields of the
result (to craft a search the checks must fail); `$FAKE_CAPACITY_EXIT` makes it exit with that
code after writing nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeRecord,
    SearchSettings,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["capacity"])
    parser.add_argument("spec")
    for option in ("--pipeline", "--region", "--rays", "--ray", "--solo", "--search-id"):
        parser.add_argument(option)
    for option in ("--slo-ms", "--percentile", "--precision", "--probe-s", "--max-probes"):
        parser.add_argument(option, type=float)
    parser.add_argument("--with", dest="with_rates", action="append", default=[])
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume")
    parser.add_argument("--db")
    parser.add_argument("--mlflow", action=argparse.BooleanOptionalAction, default=None)
    return parser


def _probe(index: int, rate: float, verdict: str) -> ProbeRecord:
    over = 0 if verdict == "met" else 40
    return ProbeRecord(
        index=index,
        rate=rate,
        seed=index,
        queries=1000,
        over_slo=over,
        verdict=verdict,
        p99_ms=10.0 if verdict == "met" else 90.0,
        run_dir=None,
    )


def _result(settings: SearchSettings, certified: float) -> CapacityResult:
    hi = certified * 1.04
    document = {
        "search_id": settings.search_id,
        "pipeline": settings.pipeline,
        "slo_ms": settings.slo_ms,
        "percentile": settings.percentile,
        "with": settings.with_rates,
        "certified_qps": certified,
        "estimate_qps": certified * 1.02,
        "estimate_ci95": (certified, hi),
        "bracket": (certified, hi),
        "probes": [_probe(0, certified, "met"), _probe(1, hi, "missed")],
        "stop_reason": "converged",
    }
    document.update(json.loads(os.environ.get("FAKE_CAPACITY_OVERRIDES", "{}")))
    return CapacityResult.model_validate(document)


def _settings(args: argparse.Namespace, search_dir: Path) -> SearchSettings:
    if args.resume:
        return SearchSettings.model_validate_json((search_dir / SEARCH_FILE).read_text())
    ray = None
    if args.region:
        ray = dict(
            (name, float(qps)) for name, qps in (item.split("=") for item in args.solo.split(","))
        )
    return SearchSettings(
        search_id=search_dir.name,
        spec_source=args.spec,
        pipeline=args.region.replace(",", "+") if args.region else args.pipeline,
        slo_ms=args.slo_ms or 50.0,
        precision=args.precision or 0.05,
        probe_s=args.probe_s or 20.0,
        min_rate=0.01,
        ray=ray,
    )


def main() -> int:
    args = _parser().parse_args()
    if os.environ.get("FAKE_CAPACITY_EXIT"):
        return int(os.environ["FAKE_CAPACITY_EXIT"])
    if args.region and (args.slo_ms or args.with_rates or args.pipeline):
        print("--region takes no --pipeline, --slo-ms or --with", file=sys.stderr)
        return 2
    folder = args.resume or args.search_id
    if args.region:
        folder = f"{args.search_id}-ray{args.ray}"  # the region's id, shared by its rays
    search_dir = Path(args.out) / folder
    search_dir.mkdir(parents=True, exist_ok=True)
    settings = _settings(args, search_dir)
    (search_dir / SEARCH_FILE).write_text(settings.model_dump_json(by_alias=True))
    record = {"argv": sys.argv[1:], "home": os.environ.get("COLLOBENCH_HOME")}
    (search_dir / "argv.json").write_text(json.dumps(record))
    rates = json.loads(os.environ.get("FAKE_CAPACITY_QPS", "{}"))
    certified = 0.8 if settings.ray else float(rates.get(settings.pipeline, 100.0))
    result = _result(settings, certified)
    (search_dir / CAPACITY_FILE).write_text(result.model_dump_json(by_alias=True))
    (search_dir / "report.md").write_text("# capacity\n")
    (search_dir / "p99_vs_rate.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    print(f"certified {certified:g} q/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

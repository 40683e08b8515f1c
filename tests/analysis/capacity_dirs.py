"""Capacity search and region directories for the warehouse tests, built through the pydantic
models of stages/contracts/capacity_files.py (so the files are exactly what a search writes)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    PROBES_FILE,
    REGION_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeKind,
    ProbeRecord,
    SearchSettings,
    StopReason,
    Verdict,
)


@dataclass(frozen=True)
class Probe:
    """One probe's figures; the record's other fields follow from them."""

    rate: float
    verdict: Verdict | None
    queries: int
    over_slo: int
    p99_ms: float | None
    kind: ProbeKind = "search"
    flagged: bool = False
    abort_reason: str | None = None
    duration_s: float | None = 20.0
    window_s: float | None = None
    cannot_pass: bool = False


@dataclass
class Search:
    """A search directory's contents: settings, probes in the order they ran, the answer."""

    search_id: str
    probes: list[Probe]
    certified_qps: float | None
    estimate_qps: float | None
    estimate_ci95: tuple[float, float] | None
    bracket: tuple[float, float | None]
    stop_reason: StopReason
    pipeline: str = "classify"
    slo_ms: float = 50.0
    with_rates: dict[str, float] = field(default_factory=dict)
    ceiling_qps: float | None = 300.0
    monotonicity_violations: int = 0
    ray: dict[str, float] | None = None
    stop_detail: str | None = None
    spent_s: float | None = None
    budget_s: float | None = None
    min_queries: int | None = None

    def settings(self) -> SearchSettings:
        return SearchSettings.model_validate(
            {
                "search_id": self.search_id,
                "spec_hash": "ab" * 32,
                "pipeline": self.pipeline,
                "slo_ms": self.slo_ms,
                "probe_s": 20.0,
                "with": self.with_rates,
                "min_rate": 1.0,
                "ray": self.ray,
                "budget_s": self.budget_s,
                "min_queries": self.min_queries,
            }
        )

    def records(self) -> list[ProbeRecord]:
        return [
            ProbeRecord(
                index=index,
                kind=probe.kind,
                rate=probe.rate,
                seed=index,
                queries=probe.queries,
                over_slo=probe.over_slo,
                verdict=probe.verdict,
                p99_ms=probe.p99_ms,
                abort_reason=probe.abort_reason,
                run_dir=None,
                flagged=probe.flagged,
                throughput_qps=probe.rate * 0.99,
                duration_s=probe.duration_s,
                window_s=probe.window_s,
                cannot_pass=probe.cannot_pass,
            )
            for index, probe in enumerate(self.probes)
        ]

    def result(self) -> CapacityResult:
        records = self.records()
        return CapacityResult.model_validate(
            {
                "search_id": self.search_id,
                "pipeline": self.pipeline,
                "slo_ms": self.slo_ms,
                "percentile": 0.99,
                "with": self.with_rates,
                "certified_qps": self.certified_qps,
                "estimate_qps": self.estimate_qps,
                "estimate_ci95": self.estimate_ci95,
                "bracket": self.bracket,
                "probes": records,
                "stop_reason": self.stop_reason,
                "ceiling_qps": self.ceiling_qps,
                "monotonicity_violations": self.monotonicity_violations,
                "flagged_probes": sum(probe.flagged for probe in self.probes),
                "stop_detail": self.stop_detail,
                "spent_s": self.spent_s,
            }
        )

    def write(self, out: Path, finished: bool = True, by_alias: bool = True) -> Path:
        """`<out>/<search_id>/` as a search leaves it: search.json, probes.jsonl and, when
        finished, capacity.json."""
        folder = out / self.search_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SEARCH_FILE).write_text(self.settings().model_dump_json(by_alias=by_alias))
        lines = [record.model_dump_json() + "\n" for record in self.records()]
        (folder / PROBES_FILE).write_text("".join(lines))
        if finished:
            (folder / CAPACITY_FILE).write_text(self.result().model_dump_json(by_alias=by_alias))
        return folder


def classify_search(search_id: str = "classify-50ms") -> Search:
    """A converged search: ceiling probe, bracket x2 up then bisections, one undecided re-probe
    that came back undecided (flagged), one aborted overload probe."""
    return Search(
        search_id=search_id,
        probes=[
            Probe(0.0, None, 3000, 0, 9.0, kind="ceiling"),
            Probe(150.0, "met", 3000, 5, 30.0),
            Probe(300.0, "missed", 400, 200, math.inf, abort_reason="cannot pass"),
            Probe(212.1, "missed", 3000, 90, 80.0),
            Probe(178.4, "undecided", 3000, 28, 49.0),
            Probe(178.4, "undecided", 3000, 29, 51.0, flagged=True),
            Probe(163.6, "met", 3000, 12, 41.0),
            Probe(170.8, "met", 3000, 16, 45.0),
        ],
        certified_qps=170.8,
        estimate_qps=176.0,
        estimate_ci95=(168.0, 185.0),
        bracket=(170.8, 178.4),
        stop_reason="converged",
    )


UNDECIDABLE_DETAIL = (
    "nothing met down to 3.4 q/s, the lowest rate whose p99 this time budget decides (459 "
    "queries a probe); the unloaded probe met the SLO; --budget-min 30 would probe down to "
    "1.7 q/s"
)


def slow_search(search_id: str = "slow-llm") -> Search:
    """An `undecidable` search of a slow pipeline (capacity II): ceiling probe, a missed rate,
    a rate stopped by the count rule without proof (cannot_pass, undecided), then the unloaded
    probe (rate 0, one query at a time), which met; windows sized by rate, a 15 min budget."""
    return Search(
        search_id=search_id,
        probes=[
            Probe(0.0, None, 600, 0, 900.0, kind="ceiling", window_s=20.0),
            Probe(6.8, "missed", 300, 120, 4000.0, window_s=74.3, abort_reason="backlog grows"),
            Probe(
                3.4,
                "undecided",
                40,
                6,
                2100.0,
                window_s=148.5,
                abort_reason="6 over the SLO: more than 459 queries may have and be met",
                cannot_pass=True,
            ),
            Probe(0.0, "met", 459, 0, 1300.0, kind="unloaded", window_s=150.0, duration_s=600.0),
        ],
        certified_qps=None,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(0.0, 6.8),
        stop_reason="undecidable",
        slo_ms=2000.0,
        ceiling_qps=13.6,
        stop_detail=UNDECIDABLE_DETAIL,
        spent_s=840.5,
        budget_s=900.0,
        min_queries=459,
    )


PAIR = ("vision", "embed")
SOLO_QPS = {"vision": 100.0, "embed": 40.0}


def write_region(out: Path, region_id: str, rays: list[dict[str, Any]]) -> Path:
    """`<out>/<region_id>/region.json` with the given rays, in the fields of the region
    helper's RegionResult (stages/capacity/region_model.py): the pair (vision, embed) with
    solo capacities SOLO_QPS."""
    folder = out / region_id
    folder.mkdir(parents=True, exist_ok=True)
    solo = {
        name: {
            "pipeline": name,
            "search_id": f"{region_id}-{name}",
            "slo_ms": 50.0,
            "certified_qps": qps,
            "estimate_qps": qps * 1.02,
            "estimate_ci95": [qps * 0.98, qps * 1.06],
            "stop_reason": "converged",
            "scaling_qps": qps,
            "scaling_source": "certified",
        }
        for name, qps in SOLO_QPS.items()
    }
    region = {
        "region_id": region_id,
        "pipelines": list(PAIR),
        "ray_count": len(rays),
        "percentile": 0.99,
        "slo_ms": {name: 50.0 for name in PAIR},
        "solo": solo,
        "rays": [{**ray, "index": index} for index, ray in enumerate(rays, start=1)],
        "complete": True,
    }
    (folder / REGION_FILE).write_text(json.dumps(region))
    return folder


def ray(
    angle_deg: float, certified_s: float, estimate_s: float, ci: tuple[float, float]
) -> dict[str, Any]:
    """A ray of the pair (vision, embed) as RayResult writes it (its `index` is set by
    write_region)."""
    angle = math.radians(angle_deg)
    direction = {"vision": math.cos(angle), "embed": math.sin(angle)}
    point = [certified_s * direction[name] for name in PAIR]
    return {
        "angle_deg": angle_deg,
        "direction": direction,
        "solo_capacity_qps": dict(SOLO_QPS),
        "search_id": f"ray-{angle_deg:g}",
        "certified_s": certified_s,
        "estimate_s": estimate_s,
        "estimate_ci95_s": list(ci),
        "bracket_s": [certified_s, certified_s * 1.04],
        "stop_reason": "converged",
        "probes": 7,
        "monotonicity_violations": 0,
        "flagged_probes": 1,
        "certified_point": {name: x * SOLO_QPS[name] for name, x in zip(PAIR, point, strict=True)},
        "normalised": point,
        "normalised_estimate": [estimate_s * direction[name] for name in PAIR],
    }

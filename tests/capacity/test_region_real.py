"""Capacity regions of known shape on the real harness (CPU, slow: several minutes each): two
`sleep` pipelines pinned to separate cores (`cpu_pinned`) do not interfere, so every ray
reaches the box [0, C_A] x [0, C_B] (the diagonal ray, where box and triangle lie furthest apart:
certified no further out than its edge plus 10%, first failing rate no further in than 0.8 of
it, where sharing one core would put it at 0.5);
two `busy` pipelines sharing core 0 (`time_slice` with cpus [0] each: cpu_pinned refuses a
shared core) take turns on it, so the diagonal ray stays inside the triangle x + y <= 1 (10%
allowed for noise). Short probes and one ray keep each test near two minutes; both run under
`make soak` (perf/soak.py), not `make test`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.reports.headline_figures import verdict_latencies
from stages import settings
from stages.capacity.region import run_region
from stages.capacity.search_runner import SearchRunOptions, run_capacity_search
from stages.contracts.capacity_files import RegionResult, SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule
from stages.validation.loading import validate_document

pytestmark = pytest.mark.spawns  # every test here starts a process

SERVICE_MS = 2.0
SLO_MS = 20.0  # 10 service times: M/D/1 capacity for p90 near 0.88 / 2 ms = 440 q/s
PERCENTILE = 0.9
# p90, not p99: a p99 verdict needs >= 459 queries (LoadGen's minimum with none over), which a
# pipeline offered a quarter of its capacity does not reach in a short probe (the search then
# re-probes an undecidable rate until its budget is spent), and p99 near the knee is noisy
# enough to fail a rate well inside the box now and then. p90 needs 44 queries.
PROBE_S = 3.0


def _pipeline(name: str, cpus: list[int], stage_type: str) -> dict[str, Any]:
    loadgen = {
        "type": "server",
        "rate": 100,
        "duration_s": PROBE_S,
        "slo_ms": SLO_MS,
        "on_full": "backlog",
        "queue_depth": 100_000,
        "timeout_s": 120,
    }
    stage = {"id": "serve", "type": stage_type, "config": {"ms": SERVICE_MS}}
    return {"name": name, "placement": {"cpus": cpus}, "loadgen": loadgen, "stages": [stage]}


def _region(
    tmp_path: Path, stage_type: str, cpus: tuple[int, int], mode: str, rays: int
) -> RegionResult:
    document = {
        "name": f"region-{stage_type}",
        "seed": 1,
        "collocation": {"mode": mode, "solo_baselines": False},
        "telemetry": {"host": {"enabled": False}, "gpu": {"enabled": False}},
        "pipelines": [
            _pipeline("a", [cpus[0]], stage_type),
            _pipeline("b", [cpus[1]], stage_type),
        ],
    }
    loaded = validate_document(document, str(tmp_path / "region.yaml"))
    options = SearchRunOptions(
        out_dir=tmp_path / "capacity",
        cache_dir=settings.cache_dir(),
        rule=LoadgenSloRule(),
        verdict_latencies=verdict_latencies,
    )
    template = SearchSettings(
        search_id="template",
        pipeline="template",
        slo_ms=SLO_MS,
        percentile=PERCENTILE,
        precision=0.15,
        max_probes=12,  # room for the later stages of undecided rates (sequential probes)
        probe_s=PROBE_S,
        base_seed=1,
        min_rate=5.0,
    )
    return run_region(
        loaded,
        ("a", "b"),
        rays,
        options,
        template,
        region_id="real",
        run_search=run_capacity_search,
    )


@pytest.mark.slow
@pytest.mark.soak  # ~100 s of real probes: `make soak` runs it (perf/soak.py); the box itself is
# also checked on simulated probes (tests/capacity)
def test_sleep_pipelines_on_separate_cores_reach_the_box(tmp_path: Path) -> None:
    region = _region(tmp_path, "sleep", (0, 1), "cpu_pinned", rays=1)  # the diagonal
    assert region.complete and len(region.rays) == 1
    for ray in region.rays:
        assert ray.certified_s is not None, ray
        low, high = ray.bracket_s
        edge = max(ray.direction.values())  # the box's edge is at s = 1 / edge
        assert low * edge <= 1.1, ray  # certified no further out than the box, within 10%
        # and not missed well inside it. The solo capacities that normalise the ray are certified
        # to the search's precision (15%), and a probe near the knee of M/D/1 fails by chance
        # (CI once saw a first failure at 0.87 of the edge), so 0.8 is the bound: it still tells
        # the box from time sharing, whose line x + y = 1 meets this ray at 0.5 of the edge.
        assert high is None or high * edge >= 0.8, ray


@pytest.mark.slow
@pytest.mark.soak  # 140-165 s of real probes (the slowest test of `make test`), and its verdict
# hangs on how a loaded machine shares core 0: `make soak` runs it (perf/soak.py). `make test`
# keeps a real region, two rays on the cluster (tests/dagster/test_cluster.py), and the triangle
# itself on simulated probes (tests/capacity/test_region.py).
def test_busy_pipelines_sharing_one_core_stay_inside_the_triangle(tmp_path: Path) -> None:
    # One ray, the diagonal, where time sharing (x + y = 1) and isolation (the box) differ most;
    # cpu_pinned refuses a shared core.
    region = _region(tmp_path, "busy", (0, 0), "time_slice", rays=1)
    assert region.complete and len(region.rays) == 1
    for ray in region.rays:
        assert ray.normalised is not None, ray
        assert sum(ray.normalised) <= 1.1, ray

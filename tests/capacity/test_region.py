"""The capacity region: ray geometry, each ray's settings, the checks on its input, and whole
regions of known shape through a simulated executor (two independent FIFO servers reach the
box [0, C_A] x [0, C_B]; one shared FIFO server stays on the line x + y = 1), resumed after a
crash without repeating a finished search."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from stages.capacity.region import (
    RegionInputError,
    ray_settings,
    region_from_searches,
    region_pipelines,
    region_slos,
    run_ray,
    run_region,
)
from stages.capacity.region_model import ray_angles_deg, ray_direction
from stages.capacity.region_store import read_region
from stages.contracts.capacity_files import CAPACITY_FILE, REGION_FILE, RegionResult, SearchSettings
from stages.validation.loading import LoadedSpec, validate_document
from tests.capacity.region_sim import SimOptions, SimulatedSearch, TwoQueueModel

SERVICE_MS = 5.0
SLO_MS = 50.0


def pipeline(name: str, cpus: list[int], **loadgen: Any) -> dict[str, Any]:
    return {
        "name": name,
        "placement": {"cpus": cpus},
        "loadgen": {"type": "server", "rate": 50, "slo_ms": SLO_MS, **loadgen},
        "stages": [{"id": "serve", "type": "sleep", "config": {"ms": SERVICE_MS}}],
    }


def loaded_spec(*pipelines: dict[str, Any]) -> LoadedSpec:
    document = {
        "name": "region",
        "collocation": {"mode": "cpu_pinned", "solo_baselines": False},
        "pipelines": list(pipelines) or [pipeline("a", [0]), pipeline("b", [1])],
    }
    return validate_document(document, "region.yaml")


def template(**update: Any) -> SearchSettings:
    values: dict[str, Any] = {
        "search_id": "template",
        "pipeline": "template",
        "slo_ms": 1.0,
        "probe_s": 20.0,
        "min_rate": 1.0,
        "precision": 0.05,
        "max_probes": 14,
    }
    return SearchSettings.model_validate(values | update)


def test_rays_lie_evenly_strictly_inside_the_quadrant() -> None:
    assert ray_angles_deg(1) == [45.0]
    angles = ray_angles_deg(5)
    assert angles == pytest.approx([15, 30, 45, 60, 75])
    gaps = {round(b - a, 9) for a, b in zip([0.0, *angles], [*angles, 90.0], strict=True)}
    assert gaps == {15.0}
    with pytest.raises(ValueError, match="at least one ray"):
        ray_angles_deg(0)


def test_a_ray_direction_is_a_unit_vector_from_the_first_axis() -> None:
    direction = ray_direction(30.0, ("a", "b"))
    assert direction == pytest.approx({"a": math.sqrt(3) / 2, "b": 0.5})
    assert math.hypot(*direction.values()) == pytest.approx(1.0)


def test_ray_settings_scale_each_pipeline_by_its_solo_capacity() -> None:
    loaded = loaded_spec(pipeline("a", [0]), pipeline("b", [1], slo_ms=80.0))
    slos = region_slos(loaded, ("a", "b"))
    settings = ray_settings(
        template(precision=0.1), loaded, "r1", ("a", "b"), slos, 1, 2, {"a": 100.0, "b": 40.0}
    )
    assert settings.search_id == "r1-ray1"
    assert settings.pipeline == "a+b"
    assert settings.ray == pytest.approx({"a": 100 * math.cos(math.pi / 6), "b": 20.0})
    assert settings.ray_slo_ms == {"a": SLO_MS, "b": 80.0}
    assert settings.slo_ms == SLO_MS
    assert settings.with_rates == {}
    assert settings.precision == 0.1  # the template's knobs carry over
    assert settings.spec_hash == loaded.spec_hash
    assert settings.min_rate is None  # the time budget decides how low a ray goes
    with pytest.raises(RegionInputError, match="--ray 3"):
        ray_settings(template(), loaded, "r1", ("a", "b"), slos, 3, 2, {"a": 1.0, "b": 1.0})


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        (["a"], "exactly two"),
        (["a", "b", "c"], "exactly two"),
        (["a", "a"], "twice"),
        (["a", "zzz"], "no pipeline 'zzz'"),
        (["a", ""], "exactly two"),
    ],
)
def test_region_names_are_checked(names: list[str], problem: str) -> None:
    with pytest.raises(RegionInputError, match=problem):
        region_pipelines(loaded_spec(), names)


def test_a_region_pipeline_needs_an_slo_and_an_open_loop() -> None:
    no_slo = pipeline("b", [1])
    no_slo["loadgen"].pop("slo_ms")
    with pytest.raises(RegionInputError, match=r"'b' has no loadgen\.slo_ms"):
        region_slos(loaded_spec(pipeline("a", [0]), no_slo), ("a", "b"))
    closed = pipeline("b", [1], type="closed_loop")
    with pytest.raises(RegionInputError, match="open-loop"):
        region_pipelines(loaded_spec(pipeline("a", [0]), closed), ["a", "b"])


def run_simulated(tmp_path: Path, shared: bool, rays: int) -> tuple[RegionResult, SimulatedSearch]:
    search = SimulatedSearch(TwoQueueModel({"a": SERVICE_MS, "b": SERVICE_MS}, shared=shared))
    options = SimOptions(tmp_path)
    region = run_region(
        loaded_spec(), ("a", "b"), rays, options, template(), region_id="reg", run_search=search
    )
    return region, search


def test_separate_servers_reach_the_box_along_every_ray(tmp_path: Path) -> None:
    region, search = run_simulated(tmp_path, shared=False, rays=5)
    assert search.calls == ["reg-a", "reg-b"] + [f"reg-ray{k}" for k in range(1, 6)]
    assert region.complete and [ray.index for ray in region.rays] == [1, 2, 3, 4, 5]
    for name in ("a", "b"):
        solo = region.solo[name]
        assert solo.scaling_source == "certified" and solo.scaling_qps == solo.certified_qps
    for ray in region.rays:
        assert ray.normalised is not None and ray.certified_point is not None
        x, y = ray.normalised
        assert max(x, y) == pytest.approx(1.0, abs=0.1)  # the box's edge, within 10%
        assert ray.certified_point["a"] == pytest.approx(x * ray.solo_capacity_qps["a"])
        assert ray.solo_capacity_qps["a"] == region.solo["a"].scaling_qps
    assert read_region(tmp_path / "reg") == region


def test_one_shared_server_stays_on_the_time_sharing_line(tmp_path: Path) -> None:
    region, _ = run_simulated(tmp_path, shared=True, rays=3)
    sums = [sum(ray.normalised) for ray in region.rays if ray.normalised is not None]
    assert len(sums) == 3
    for total in sums:
        # The merged stream is Poisson at the summed rate: the frontier is x + y = 1, reached
        # within the search's precision (the solo capacities are certified, up to 5% low).
        assert 0.85 <= total <= 1.08


def test_a_killed_region_resumes_without_repeating_finished_searches(tmp_path: Path) -> None:
    first, _ = run_simulated(tmp_path, shared=False, rays=3)
    (tmp_path / "reg-ray3" / CAPACITY_FILE).unlink()  # the ray in flight when it was killed
    (tmp_path / "reg" / REGION_FILE).write_text(
        first.model_copy(update={"rays": first.rays[:2], "complete": False}).model_dump_json()
    )
    again, search = run_simulated(tmp_path, shared=False, rays=3)
    assert search.calls == ["reg-ray3"]
    assert again == first


def test_a_region_id_reused_with_other_rays_is_refused(tmp_path: Path) -> None:
    run_simulated(tmp_path, shared=False, rays=1)
    with pytest.raises(RegionInputError, match="1 rays"):
        run_simulated(tmp_path, shared=False, rays=2)


def test_a_pipeline_infeasible_alone_stops_the_region_with_a_note(tmp_path: Path) -> None:
    search = SimulatedSearch(TwoQueueModel({"a": SERVICE_MS, "b": 2 * SLO_MS}, shared=False))
    region = run_region(
        loaded_spec(),
        ("a", "b"),
        2,
        SimOptions(tmp_path),
        template(),
        region_id="reg",
        run_search=search,
    )
    assert search.calls == ["reg-a", "reg-b"]
    assert region.rays == [] and not region.complete
    assert region.note is not None and "b alone has no capacity" in region.note


def test_one_ray_runs_alone_given_the_solo_capacities(tmp_path: Path) -> None:
    search = SimulatedSearch(TwoQueueModel({"a": SERVICE_MS, "b": SERVICE_MS}, shared=False))
    ray = run_ray(
        loaded_spec(),
        ("a", "b"),
        2,
        3,
        {"a": 150.0, "b": 150.0},
        SimOptions(tmp_path),
        template(),
        region_id="reg",
        run_search=search,
    )
    assert search.calls == ["reg-ray2"]
    assert ray.angle_deg == 45.0 and ray.solo_capacity_qps == {"a": 150.0, "b": 150.0}
    with pytest.raises(RegionInputError, match="positive capacity"):
        run_ray(
            loaded_spec(),
            ("a", "b"),
            1,
            3,
            {"a": 150.0},
            SimOptions(tmp_path),
            template(),
            region_id="reg",
            run_search=search,
        )


def test_the_region_reassembles_from_its_searches_as_dagster_needs(tmp_path: Path) -> None:
    written, _ = run_simulated(tmp_path, shared=False, rays=3)
    assembled = region_from_searches(loaded_spec(), ("a", "b"), 3, tmp_path, "reg", 0.99)
    assert assembled == written
    (tmp_path / "reg-ray2" / CAPACITY_FILE).unlink()
    partial = region_from_searches(loaded_spec(), ("a", "b"), 3, tmp_path, "reg", 0.99)
    assert [ray.index for ray in partial.rays] == [1, 3] and not partial.complete
    (tmp_path / "reg-b" / CAPACITY_FILE).unlink()
    with pytest.raises(RegionInputError, match="solo search of 'b' has not finished"):
        region_from_searches(loaded_spec(), ("a", "b"), 3, tmp_path, "reg", 0.99)


def test_a_search_folder_holding_other_settings_is_refused(tmp_path: Path) -> None:
    run_simulated(tmp_path, shared=False, rays=1)
    (tmp_path / "reg" / REGION_FILE).unlink()
    search = SimulatedSearch(TwoQueueModel({"a": SERVICE_MS, "b": SERVICE_MS}, shared=False))
    with pytest.raises(RegionInputError, match="reg-a holds a search with other settings"):
        run_region(
            loaded_spec(),
            ("a", "b"),
            1,
            SimOptions(tmp_path),
            template(precision=0.2),
            region_id="reg",
            run_search=search,
        )
    assert search.calls == []

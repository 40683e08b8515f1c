"""`collobench capacity --region A,B`: what the command prints for a region and for one ray,
its one-line refusals (exit 2) and Ctrl-C (exit 130, how to resume), on the simulated
two-queue executor of tests/capacity/region_sim.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from stages.capacity.region_question import parse_solo
from stages.capacity.region_store import read_region
from stages.cli.commands.capacity_region import refuse_region_conflicts, run_region_command
from stages.contracts.capacity_files import (
    REGION_FILE,
    CapacityResult,
    RayResult,
    RegionResult,
    SearchSettings,
)
from tests.capacity.region_sim import SimOptions, SimulatedSearch, TwoQueueModel
from tests.capacity.test_region import loaded_spec, pipeline, template


def command(tmp_path: Path, region: str = "a,b", rays: int = 2, **kwargs: Any) -> Any:
    search = kwargs.pop("run_search", None) or SimulatedSearch(
        TwoQueueModel({"a": 5.0, "b": 5.0}, shared=False)
    )
    return run_region_command(
        Path("region.yaml"),
        kwargs.pop("loaded", None) or loaded_spec(),
        region,
        rays,
        options=SimOptions(tmp_path),
        settings_template=template(),
        run_search=search,
        **kwargs,
    )


def test_a_region_prints_its_solo_capacities_rays_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plots: list[Path] = []

    def report(region_dir: Path) -> Path:
        plots.append(region_dir)
        return region_dir / "region.png"

    result = command(tmp_path, rays=3, region_id="pair", report=report)
    printed = capsys.readouterr().out
    assert isinstance(result, RegionResult) and len(result.rays) == 3
    assert "a alone (SLO 50 ms): certified" in printed and "b alone" in printed
    for ray in result.rays:
        assert f"{ray.angle_deg:.1f}°" in printed
        assert ray.normalised is not None
        assert f"{sum(ray.normalised):.2f}" in printed
    assert f"region: {tmp_path / 'pair' / REGION_FILE}" in printed
    assert plots == [tmp_path / "pair"] and "plot: " in printed
    assert read_region(tmp_path / "pair") == result


def test_a_region_without_an_id_gets_a_new_folder(tmp_path: Path) -> None:
    result = command(tmp_path, rays=1)
    assert result.region_id.startswith("region-a-b-")
    assert (tmp_path / result.region_id / REGION_FILE).is_file()


def test_one_ray_runs_alone_and_writes_no_region_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = command(tmp_path, rays=3, ray=2, solo="a=150,b=140", region_id="pair")
    assert isinstance(result, RayResult) and result.index == 2
    assert result.solo_capacity_qps == {"a": 150.0, "b": 140.0}
    assert (tmp_path / "pair-ray2").is_dir() and not (tmp_path / "pair").exists()
    assert f"search: {tmp_path / 'pair-ray2'}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("region", "rays", "extra", "problem"),
    [
        ("a", 2, {}, "exactly two"),
        ("a,b,c", 2, {}, "exactly two"),
        ("a,a", 2, {}, "twice"),
        ("a,zzz", 2, {}, "no pipeline 'zzz'"),
        ("a,b", 0, {}, "--rays must be at least 1"),
        ("a,b", 2, {"ray": 1, "region_id": "r"}, "--ray needs --solo"),
        ("a,b", 2, {"ray": 1, "solo": "a=1,b=1"}, "--ray needs --search-id"),
        ("a,b", 2, {"ray": 3, "solo": "a=1,b=1", "region_id": "r"}, "--ray 3 is not one"),
        ("a,b", 2, {"solo": "a=1,b=1"}, "--solo goes with --ray"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    region: str,
    rays: int,
    extra: dict[str, Any],
    problem: str,
) -> None:
    with pytest.raises(typer.Exit) as raised:
        command(tmp_path, region, rays, **extra)
    assert raised.value.exit_code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0]


def test_a_region_pipeline_without_an_slo_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_slo = pipeline("b", [1])
    no_slo["loadgen"].pop("slo_ms")
    with pytest.raises(typer.Exit) as raised:
        command(tmp_path, loaded=loaded_spec(pipeline("a", [0]), no_slo))
    assert raised.value.exit_code == 2
    assert "'b' has no loadgen.slo_ms" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["a=150", "a=150,b=0", "a=150,c=3", "a=x,b=1", "a150,b=1"])
def test_solo_capacities_need_both_pipelines_positive(text: str) -> None:
    with pytest.raises(ValueError, match="--solo"):
        parse_solo(text, ("a", "b"))


def test_ctrl_c_exits_130_saying_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(loaded: Any, settings: SearchSettings, options: Any) -> CapacityResult:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as raised:
        command(tmp_path, region_id="pair", run_search=interrupted)
    assert raised.value.exit_code == 130
    assert "--region a,b --rays 2 --resume pair" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pipeline", "slo_ms", "with_rates", "flags"),
    [("a", None, None, "--pipeline"), (None, 30.0, ["b=3"], "--slo-ms, --with")],
)
def test_region_refuses_single_search_flags(
    capsys: pytest.CaptureFixture[str],
    pipeline: str | None,
    slo_ms: float | None,
    with_rates: list[str] | None,
    flags: str,
) -> None:
    refuse_region_conflicts(None, None, None)  # none given: nothing to refuse
    with pytest.raises(typer.Exit) as raised:
        refuse_region_conflicts(pipeline, slo_ms, with_rates)
    assert raised.value.exit_code == 2
    assert f"--region takes no {flags}" in capsys.readouterr().err

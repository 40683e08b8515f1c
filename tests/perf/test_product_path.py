"""The perf scripts' product path: a spec run by the `collobench` console script in a
subprocess, its measured rows read back, and a failed run reported with its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf import product_path
from stages.spec.loadgen import loadgen_spec
from stages.spec.models import PipelineSpec, StageSpec

pytestmark = pytest.mark.spawns


def _noop(name: str, **loadgen: object) -> PipelineSpec:
    return PipelineSpec(
        name=name,
        loadgen=loadgen_spec(**loadgen),
        stages=[StageSpec(id="nothing", type="noop")],
    )


def test_a_spec_runs_through_collobench_run_and_its_rows_come_back(tmp_path: Path) -> None:
    pipeline = _noop("p", type="constant", rate=200, duration_s=0.5, warmup_queries=10)
    document = product_path.spec_document("pp", [pipeline], telemetry={"host": {"enabled": False}})
    run_dir = product_path.run_spec(document, tmp_path, "pp")
    assert run_dir.parent == tmp_path / "pp-runs"
    rows = product_path.measured_queries(run_dir, "p")
    assert 80 <= rows.num_rows <= 100  # 0.5 s at 200/s, less the 10 warm-up queries
    assert not any(rows.column("warmup").to_pylist())
    assert set(rows.column("status").to_pylist()) == {"ok"}
    assert (tmp_path / "home").is_dir()  # its own home: nothing written to the user's


def test_a_run_that_fails_raises_with_its_output(tmp_path: Path) -> None:
    document = product_path.spec_document("bad", [_noop("p", type="constant", rate=10)])
    document["pipelines"][0]["stages"][0]["type"] = "no_such_stage"
    with pytest.raises(product_path.ProductPathError, match=r"exit 2[\s\S]*no_such_stage"):
        product_path.run_spec(document, tmp_path, "bad")

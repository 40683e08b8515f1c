"""The warehouse reads the capacity search's files through the contract's records
(stages.contracts.capacity_files, which the writer uses too; analysis.capacity.file_reader):
the file names are defined once, and records built through the models, written either way
(`with` by alias or `with_rates` by name), load into the capacity tables with their values."""

from __future__ import annotations

import ast
from pathlib import Path

import duckdb
import pytest

from analysis.capacity.warehouse_tables import load_region, load_search
from stages.contracts.capacity_files import CAPACITY_FILE, REGION_FILE, PipelineProbe, RegionResult
from tests.analysis.capacity_dirs import classify_search, ray, write_region
from tests.helpers import REPO


@pytest.mark.slow
def test_no_copy_of_the_file_names_outside_the_contract() -> None:
    """The capacity file names are defined once: no other module of ours assigns them."""
    names = {"SEARCH_FILE", "PROBES_FILE", "CAPACITY_FILE", "REGION_FILE", "PROBE_RUNS_DIR"}
    defined = []
    for package in ("stages", "analysis", "bench_defs"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Assign):
                    targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                    defined += [f"{path.relative_to(REPO)}: {n}" for n in targets & names]
    assert sorted(defined) == [
        f"stages/contracts/capacity_files.py: {name}" for name in sorted(names)
    ]


@pytest.mark.parametrize("by_alias", [True, False], ids=["with", "with_rates"])
def test_model_records_load_with_their_values(tmp_path: Path, by_alias: bool) -> None:
    search = classify_search()
    search.with_rates = {"embed": 12.5}
    folder = search.write(tmp_path, by_alias=by_alias)
    # one probe carries every optional field, pipelines included
    result = search.result()
    full = result.probes[1].model_copy(
        update={
            "run_dir": str(tmp_path / "probes" / "r1"),
            "batches": [(300, 1)] * 10,
            "pipelines": {
                "classify": PipelineProbe(
                    rate_qps=150.0, queries=3000, over_slo=5, verdict="met", p99_ms=30.0
                )
            },
        }
    )
    result = result.model_copy(update={"probes": [result.probes[0], full, *result.probes[2:]]})
    (folder / CAPACITY_FILE).write_text(result.model_dump_json(by_alias=by_alias))

    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert load_search(connection, folder) == result.search_id
    searched = connection.execute(
        "SELECT pipeline, slo_ms, percentile, CAST(with_rates->>'$.embed' AS DOUBLE), "
        "certified_qps, estimate_qps, "
        "estimate_ci95_low, estimate_ci95_high, bracket_lo, bracket_hi, stop_reason, "
        "ceiling_qps, flagged_probes, probes, precision, probe_s, spec_hash "
        "FROM capacity_searches"
    ).fetchall()
    settings = search.settings()
    assert searched == [
        (
            result.pipeline,
            result.slo_ms,
            result.percentile,
            12.5,
            result.certified_qps,
            result.estimate_qps,
            *(result.estimate_ci95 or (None, None)),
            *result.bracket,
            result.stop_reason,
            result.ceiling_qps,
            result.flagged_probes,
            len(result.probes),
            settings.precision,
            settings.probe_s,
            settings.spec_hash,
        )
    ]
    probes = connection.execute(
        "SELECT probe_index, kind, rate, seed, queries, over_slo, verdict, abort_reason, "
        "run_dir, flagged, throughput_qps, duration_s, pipelines->>'$.classify.verdict' "
        "FROM capacity_probes ORDER BY probe_index"
    ).fetchall()
    assert probes == [
        (
            p.index,
            p.kind,
            p.rate,
            p.seed,
            p.queries,
            p.over_slo,
            p.verdict,
            p.abort_reason,
            p.run_dir,
            p.flagged,
            p.throughput_qps,
            p.duration_s,
            p.pipelines["classify"].verdict if p.pipelines else None,
        )
        for p in result.probes
    ]


def test_region_records_load_with_their_values(tmp_path: Path) -> None:
    folder = write_region(
        tmp_path, "pair", [ray(angle, 0.6, 0.63, (0.59, 0.7)) for angle in (30.0, 60.0)]
    )
    path = folder / REGION_FILE
    region = RegionResult.model_validate_json(path.read_text())
    path.write_text(region.model_dump_json(indent=2))

    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert load_region(connection, folder) == region.region_id
    loaded = connection.execute(
        "SELECT ray_index, angle_deg, pipeline_a, pipeline_b, solo_capacity_a_qps, "
        "solo_capacity_b_qps, certified_s, estimate_s, estimate_s_ci_low, estimate_s_ci_high, "
        "bracket_lo_s, bracket_hi_s, stop_reason, probes, flagged_probes, search_id, "
        "certified_x, certified_y FROM capacity_region ORDER BY ray_index"
    ).fetchall()
    first, second = region.pipelines
    expected = [
        (
            r.index,
            r.angle_deg,
            first,
            second,
            r.solo_capacity_qps[first],
            r.solo_capacity_qps[second],
            r.certified_s,
            r.estimate_s,
            *(r.estimate_ci95_s or (None, None)),
            *r.bracket_s,
            r.stop_reason,
            r.probes,
            r.flagged_probes,
            r.search_id,
            *(r.normalised or (None, None)),
        )
        for r in region.rays
    ]
    assert [row[:-2] for row in loaded] == [row[:-2] for row in expected]
    for row, want in zip(loaded, expected, strict=True):
        assert row[-2:] == pytest.approx(want[-2:])

"""The capacity warehouse (analysis.capacity_warehouse): loading a search twice leaves one copy, the
`capacity` view's figures follow from the probes, an unfinished search loads from probes.jsonl,
the `capacity_region` view normalises each ray by the solo capacities, a version-2 warehouse
migrates, and the reports write their plots and link them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analysis import capacity_warehouse, migrations
from analysis.capacity_warehouse import (
    CapacityFileError,
    load_capacity_dirs,
    load_region,
    load_search,
)
from analysis.db import run_query
from analysis.loader import load_runs
from analysis.report_entries import ReportCatalogueError
from analysis.views_not_per_run import CAPACITY_CATALOGUE
from tests.analysis.capacity_dirs import (
    SOLO_QPS,
    Probe,
    Search,
    classify_search,
    ray,
    write_region,
)
from tests.analysis.runs import single_pipeline_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows(connection: duckdb.DuckDBPyConnection, table: str) -> list[tuple[Any, ...]]:
    """Every row of `table` but loaded_at (the load's own time), in a fixed order."""
    columns = [
        row[0]
        for row in connection.execute(f"DESCRIBE {table}").fetchall()
        if row[0] != "loaded_at"
    ]
    return connection.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY ALL").fetchall()


def test_loading_a_search_twice_leaves_the_same_rows(tmp_path: Path) -> None:
    folder = classify_search().write(tmp_path)
    other = classify_search("other").write(tmp_path)
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, folder)
    load_search(connection, other)
    first = {table: rows(connection, table) for table in ("capacity_searches", "capacity_probes")}
    load_search(connection, folder)
    assert {table: rows(connection, table) for table in first} == first
    assert len(first["capacity_searches"]) == 2
    assert len(first["capacity_probes"]) == 2 * len(classify_search().probes)


def test_the_capacity_view_counts_what_the_probes_say(tmp_path: Path) -> None:
    search = classify_search()
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, search.write(tmp_path))
    frame = connection.execute("SELECT * FROM capacity").df()
    assert len(frame) == 1
    row = frame.iloc[0]
    probes = search.probes
    lo, hi = search.bracket
    assert hi is not None
    assert row["bracket_ratio"] == pytest.approx(hi / lo)
    assert bool(row["within_precision"]) == (hi / lo <= 1.05)
    expected = {
        "probes": len(probes),
        "search_probes": sum(p.kind == "search" for p in probes),
        "met_probes": sum(p.verdict == "met" for p in probes),
        "missed_probes": sum(p.verdict == "missed" for p in probes),
        "undecided_probes": sum(p.verdict == "undecided" for p in probes),
        "flagged_probes": sum(p.flagged for p in probes),
        "aborted_probes": sum(p.abort_reason is not None for p in probes),
        "monotonicity_violations": search.monotonicity_violations,
    }
    assert {key: int(row[key]) for key in expected} == expected
    assert row["probe_time_s"] == pytest.approx(sum(p.duration_s or 0 for p in probes))
    assert (row["certified_qps"], row["estimate_qps"]) == (
        search.certified_qps,
        search.estimate_qps,
    )
    assert (row["estimate_qps_ci_low"], row["estimate_qps_ci_high"]) == search.estimate_ci95
    assert row["stop_reason"] == "converged" and bool(row["complete"])
    share = connection.execute(
        "SELECT over_slo_share FROM capacity_probes WHERE probe_index = 3"
    ).fetchone()
    assert share == (probes[3].over_slo / probes[3].queries,)


def test_an_unfinished_search_loads_from_probes_jsonl_and_a_resume_replaces_it(
    tmp_path: Path,
) -> None:
    search = classify_search()
    search.probes = search.probes[:3]
    folder = search.write(tmp_path, finished=False)
    with (folder / capacity_warehouse.PROBES_FILE).open("a") as handle:
        handle.write('{"index": 3, "kind": "sea')  # torn by a crash mid-write
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, folder)
    row = connection.execute(
        "SELECT probes, certified_qps, bracket_lo, stop_reason, complete FROM capacity"
    ).fetchone()
    assert row == (3, None, None, None, False)

    classify_search().write(tmp_path)  # resumed and finished
    load_search(connection, folder)
    assert connection.execute("SELECT probes, complete FROM capacity").fetchone() == (
        len(classify_search().probes),
        True,
    )


def test_bad_search_directories_are_one_line_errors(tmp_path: Path) -> None:
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    with pytest.raises(CapacityFileError, match=r"not a capacity search \(no search.json\)$"):
        load_search(connection, tmp_path)
    folder = classify_search().write(tmp_path, finished=False)
    (folder / capacity_warehouse.PROBES_FILE).write_text('{"index": 0,\n{"index": 1}\n')
    with pytest.raises(CapacityFileError, match=r"probes.jsonl:1: not a JSON probe record"):
        load_search(connection, folder)


def test_the_region_view_normalises_each_ray(tmp_path: Path) -> None:
    angles = (15.0, 30.0, 45.0, 60.0, 75.0)
    written = [ray(angle, 0.6 + i / 10, 0.65 + i / 10, (0.6, 0.8 + i / 10)) for i, angle in
               enumerate(angles)]  # fmt: skip
    folder = write_region(tmp_path, "vision+embed", written)
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert load_region(connection, folder) == "vision+embed"
    assert load_region(connection, folder) == "vision+embed"  # idempotent
    frame = connection.execute("SELECT * FROM capacity_region ORDER BY ray_index").df()
    assert list(frame["angle_deg"]) == list(angles)
    assert list(frame["ray_index"]) == list(range(1, len(angles) + 1))
    assert set(frame["solo_capacity_a_qps"]) == {SOLO_QPS["vision"]}
    assert set(frame["solo_capacity_b_qps"]) == {SOLO_QPS["embed"]}
    assert set(frame["pipeline_a"]) == {"vision"} and set(frame["pipeline_b"]) == {"embed"}
    for (_, row), source in zip(frame.iterrows(), written, strict=True):
        cos, sin = (
            math.cos(math.radians(row["angle_deg"])),
            math.sin(math.radians(row["angle_deg"])),
        )
        s: float = source["certified_s"]
        low, high = source["estimate_ci95_s"]
        assert row["certified_x"] == pytest.approx(s * cos)
        assert row["certified_y"] == pytest.approx(s * sin, abs=1e-12)
        assert row["certified_sum"] == pytest.approx(s * (cos + sin))
        assert row["certified_rate_a_qps"] == pytest.approx(s * cos * SOLO_QPS["vision"])
        assert row["certified_rate_b_qps"] == pytest.approx(s * sin * SOLO_QPS["embed"])
        assert (row["certified_x"], row["certified_y"]) == pytest.approx(source["normalised"])
        assert row["estimate_x_ci_low"] == pytest.approx(low * cos)
        assert row["estimate_y_ci_high"] == pytest.approx(high * sin, abs=1e-12)
        assert row["estimate_sum_ci_high"] == pytest.approx(high * (cos + sin))
        # the ray meets x + y = 1 at s = 1 / (cos + sin) and leaves the unit box at 1 / max
        assert row["time_sharing_s"] * (cos + sin) == pytest.approx(1.0)
        assert row["box_s"] * max(cos, sin) == pytest.approx(1.0)
    assert list(frame["probes"]) == [source["probes"] for source in written]


def test_load_capacity_dirs_loads_probe_runs_and_ray_searches(
    tmp_path: Path, db_path: Path
) -> None:
    run_dir = single_pipeline_run(tmp_path / "runs").write()
    search = classify_search("ray-45")
    search.ray = {"vision": 70.7, "embed": 28.3}
    search.pipeline = "vision+embed"
    folder = search.write(tmp_path / "out")
    result = (folder / capacity_warehouse.CAPACITY_FILE).read_text()
    broken = folder / "probes" / "20260101-000001-broken"  # a probe killed before its manifest
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{}")
    probe_runs = result.replace('"run_dir":null', f'"run_dir":"{run_dir}"', 1)
    probe_runs = probe_runs.replace('"run_dir":null', f'"run_dir":"{broken.name}"', 1)
    (folder / capacity_warehouse.CAPACITY_FILE).write_text(probe_runs)
    region = write_region(tmp_path / "out", "region", [ray(45.0, 0.6, 0.62, (0.58, 0.66))])
    classify_search("region-vision").write(tmp_path / "out")  # the solo search of `vision`

    said: list[str] = []
    loaded = load_capacity_dirs([region], db_path, wait_s=5, notify=said.append)

    assert loaded == ["region", "region-vision", "ray-45"]
    assert said == [
        f"skipping probe run {broken}: {broken / 'manifest.json'}: manifest has no run_id"
    ]
    assert run_query(db_path, "SELECT run_id FROM runs")[1] == [(run_dir.name,)]
    _, searched = run_query(
        db_path, "SELECT search_id, ray->>'$.vision' FROM capacity_searches ORDER BY search_id"
    )
    assert searched == [("ray-45", "70.7"), ("region-vision", None)]
    frame = capacity_warehouse.capacity_table(db_path, "capacity_region", "region")
    assert list(frame["search_id"]) == ["ray-45"]
    assert list(capacity_warehouse.capacity_table(db_path, "capacity", "ray-45")["pipeline"]) == [
        "vision+embed"
    ]
    with pytest.raises(ReportCatalogueError, match="not a capacity view"):
        capacity_warehouse.capacity_table(db_path, "latency")
    for view in CAPACITY_CATALOGUE:  # every catalogued column is in its view
        assert view.columns() <= set(capacity_warehouse.capacity_table(db_path, view.view).columns)


def test_a_version_2_warehouse_migrates_to_the_capacity_tables(
    tmp_path: Path, db_path: Path
) -> None:
    load_runs([single_pipeline_run(tmp_path / "runs").write()], db_path)
    connection = duckdb.connect(str(db_path))
    try:  # back to version 2: no capacity tables or views, schema_info at 2
        connection.execute("DROP VIEW capacity_region; DROP VIEW capacity")
        for table in ("capacity_probes", "capacity_searches", "capacity_region_rays"):
            connection.execute(f"DROP TABLE {table}")
        connection.execute("UPDATE schema_info SET version = 2")
    finally:
        connection.close()
    said: list[str] = []
    load_capacity_dirs([classify_search().write(tmp_path)], db_path, notify=said.append)
    assert said == [
        f"{db_path}: upgraded the warehouse schema from version 2 to {migrations.CURRENT_VERSION}"
    ]
    _, versions = run_query(db_path, "SELECT version FROM schema_info ORDER BY version")
    # Every version reached is recorded: 3 (the capacity tables), then each later one.
    assert versions == [(version,) for version in range(2, migrations.CURRENT_VERSION + 1)]
    assert run_query(db_path, "SELECT count(*) FROM capacity")[1] == [(1,)]


def test_search_report_writes_the_plot_and_links_it(tmp_path: Path) -> None:
    search = classify_search()
    search.with_rates = {"embed": 12.5}
    folder = search.write(tmp_path)
    report = capacity_warehouse.write_search_report(folder)
    text = report.read_text()
    plot = folder / capacity_warehouse.SEARCH_PLOT
    assert report == folder / "report.md"
    assert plot.read_bytes().startswith(PNG_MAGIC) and plot.stat().st_size > 10_000
    assert f"]({plot.name})" in text
    assert "embed at 12.5 q/s" in text and "converged" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(search.probes)  # header + one line per probe
    assert "| 5 | search | 178.4 | 5 | 3000 | 29 | undecided | 51 | yes |" in text


def test_an_unfinished_or_infeasible_search_still_plots(tmp_path: Path) -> None:
    search = Search(
        search_id="hopeless",
        probes=[Probe(10.0, "missed", 50, 40, None, abort_reason="cannot pass")],
        certified_qps=None,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(0.0, 10.0),
        stop_reason="infeasible",
        ceiling_qps=None,
    )
    for finished in (False, True):
        report = capacity_warehouse.write_search_report(search.write(tmp_path, finished=finished))
        assert (report.parent / capacity_warehouse.SEARCH_PLOT).stat().st_size > 0
    assert "infeasible" in report.read_text()


def test_region_report_writes_the_plot_and_links_it(tmp_path: Path) -> None:
    folder = write_region(
        tmp_path, "pair", [ray(a, 0.7, 0.72, (0.69, 0.75)) for a in (22.5, 45.0, 67.5)]
    )
    report = capacity_warehouse.write_region_report(folder)
    text = report.read_text()
    plot = folder / capacity_warehouse.REGION_PLOT
    assert plot.read_bytes().startswith(PNG_MAGIC) and plot.stat().st_size > 10_000
    assert f"]({plot.name})" in text and "x + y = 1" in text
    assert "| 45 | 0.7 | (0.495, 0.495) | 0.9899 |" in text  # 0.7 * cos 45 = 0.495
    assert text.count("| converged | ray-") == 3
    assert "**vision** alone: 100 q/s" in text and "**embed** alone: 40 q/s" in text


def test_a_probe_s_design_effect_is_kept(tmp_path: Path) -> None:
    """helper "core"'s ProbeRecord.design_effect (bursts inflate the variance of the count)."""
    folder = classify_search().write(tmp_path, finished=False)
    lines = (folder / capacity_warehouse.PROBES_FILE).read_text().splitlines()
    record = json.loads(lines[1])
    record["design_effect"] = 2.5
    lines[1] = json.dumps(record)
    (folder / capacity_warehouse.PROBES_FILE).write_text("\n".join(lines) + "\n")
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, folder)
    found = connection.execute(
        "SELECT probe_index, design_effect FROM capacity_probes WHERE design_effect IS NOT NULL"
    ).fetchall()
    assert found == [(1, 2.5)]

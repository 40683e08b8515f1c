"""The capacity warehouse (analysis.capacity.warehouse_tables): loading a search twice leaves one
copy, the `capacity` view's figures follow from the probes, an unfinished search loads from
probes.jsonl, the `capacity_region` view normalises each ray by the solo capacities, a version-2
warehouse migrates, and the reports write their plots and link them. Capacity II: the endings'
evidence, the time spent, the planned windows, cannot-pass and unloaded probes load (and an
older search without them still does), the unloaded probe's verdict is no search verdict, a
version-6 warehouse gains the columns, and the plot draws the unloaded probe as a line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analysis.capacity import report_markdown
from analysis.capacity.file_reader import CapacityFileError
from analysis.capacity.warehouse_tables import (
    capacity_table,
    load_capacity_dirs,
    load_region,
    load_search,
)
from analysis.reports.report_entries import ReportCatalogueError
from analysis.reports.views_not_per_run import CAPACITY_CATALOGUE
from analysis.warehouse import migrations
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import run_query
from stages.contracts.capacity_files import CAPACITY_FILE, PROBES_FILE, SEARCH_FILE
from tests.analysis.capacity_dirs import (
    SOLO_QPS,
    UNDECIDABLE_DETAIL,
    Probe,
    Search,
    classify_search,
    ray,
    slow_search,
    write_region,
)
from tests.analysis.runs import single_pipeline_run
from tests.analysis.test_migrations import table_columns
from tests.helpers import REPO

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
    with (folder / PROBES_FILE).open("a") as handle:
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
    (folder / PROBES_FILE).write_text('{"index": 0,\n{"index": 1}\n')
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
    result = (folder / CAPACITY_FILE).read_text()
    broken = folder / "probes" / "20260101-000001-broken"  # a probe killed before its manifest
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{}")
    probe_runs = result.replace('"run_dir":null', f'"run_dir":"{run_dir}"', 1)
    probe_runs = probe_runs.replace('"run_dir":null', f'"run_dir":"{broken.name}"', 1)
    (folder / CAPACITY_FILE).write_text(probe_runs)
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
    frame = capacity_table(db_path, "capacity_region", "region")
    assert list(frame["search_id"]) == ["ray-45"]
    assert list(capacity_table(db_path, "capacity", "ray-45")["pipeline"]) == ["vision+embed"]
    with pytest.raises(ReportCatalogueError, match="not a capacity view"):
        capacity_table(db_path, "latency")
    for view in CAPACITY_CATALOGUE:  # every catalogued column is in its view
        assert view.columns() <= set(capacity_table(db_path, view.view).columns)


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
    report = report_markdown.write_search_report(folder)
    text = report.read_text()
    plot = folder / report_markdown.SEARCH_PLOT
    assert report == folder / "report.md"
    assert plot.read_bytes().startswith(PNG_MAGIC) and plot.stat().st_size > 10_000
    assert f"]({plot.name})" in text
    assert "embed at 12.5 q/s" in text and "converged" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(search.probes)  # header + one line per probe
    assert "| 5 | search | 178.4 | - | 5 | 3000 | 29 | undecided | 51 | yes |" in text


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
        report = report_markdown.write_search_report(search.write(tmp_path, finished=finished))
        assert (report.parent / report_markdown.SEARCH_PLOT).stat().st_size > 0
    assert "infeasible" in report.read_text()


def test_region_report_writes_the_plot_and_links_it(tmp_path: Path) -> None:
    folder = write_region(
        tmp_path, "pair", [ray(a, 0.7, 0.72, (0.69, 0.75)) for a in (22.5, 45.0, 67.5)]
    )
    report = report_markdown.write_region_report(folder)
    text = report.read_text()
    plot = folder / report_markdown.REGION_PLOT
    assert plot.read_bytes().startswith(PNG_MAGIC) and plot.stat().st_size > 10_000
    assert f"]({plot.name})" in text and "x + y = 1" in text
    assert "| 45 | 0.7 | (0.495, 0.495) | 0.9899 |" in text  # 0.7 * cos 45 = 0.495
    assert text.count("| converged | ray-") == 3
    assert "**vision** alone: 100 q/s" in text and "**embed** alone: 40 q/s" in text


def test_a_probe_s_design_effect_is_kept(tmp_path: Path) -> None:
    """helper "core"'s ProbeRecord.design_effect (bursts inflate the variance of the count)."""
    folder = classify_search().write(tmp_path, finished=False)
    lines = (folder / PROBES_FILE).read_text().splitlines()
    record = json.loads(lines[1])
    record["design_effect"] = 2.5
    lines[1] = json.dumps(record)
    (folder / PROBES_FILE).write_text("\n".join(lines) + "\n")
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, folder)
    found = connection.execute(
        "SELECT probe_index, design_effect FROM capacity_probes WHERE design_effect IS NOT NULL"
    ).fetchall()
    assert found == [(1, 2.5)]


# ---------------------------------------------------------------- capacity II


def documented_capacity_columns() -> list[str]:
    """The `capacity` view's columns as docs/contracts.md lists them (the output contract)."""
    text = (REPO / "docs" / "contracts.md").read_text()
    section = text[text.index("#### `capacity`\n") :]
    line = next(row for row in section.splitlines() if row.startswith("Columns: "))
    return [name.strip("`.") for name in line.removeprefix("Columns: ").split(", ")]


def test_a_slow_search_loads_its_ending_windows_and_unloaded_probe(tmp_path: Path) -> None:
    search = slow_search()
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, search.write(tmp_path))
    searched = connection.execute(
        "SELECT stop_reason, stop_detail, spent_s, budget_s, min_queries, bracket_lo, bracket_hi "
        "FROM capacity_searches"
    ).fetchall()
    assert searched == [("undecidable", UNDECIDABLE_DETAIL, 840.5, 900.0, 459, 0.0, 6.8)]
    probes = connection.execute(
        "SELECT kind, rate, verdict, window_s, cannot_pass FROM capacity_probes "
        "ORDER BY probe_index"
    ).fetchall()
    assert probes == [(p.kind, p.rate, p.verdict, p.window_s, p.cannot_pass) for p in search.probes]
    frame = connection.execute("SELECT * FROM capacity").df()
    # The view's columns are the documented contract: the new ones last, none reordered.
    assert list(frame.columns) == documented_capacity_columns()
    assert list(frame.columns)[-2:] == ["stop_detail", "spent_s"]
    row = frame.iloc[0]
    assert (row["stop_detail"], row["spent_s"]) == (UNDECIDABLE_DETAIL, 840.5)
    # The unloaded probe met, but it is no rate of the search: no met search probe.
    expected = {
        "probes": 4,
        "search_probes": 2,
        "met_probes": 0,
        "missed_probes": 1,
        "undecided_probes": 1,
        "aborted_probes": 2,
        "flagged_probes": 0,
    }
    assert {key: int(row[key]) for key in expected} == expected
    assert row["probe_time_s"] == pytest.approx(sum(p.duration_s or 0 for p in search.probes))


def _strip(document: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key not in names}


def test_a_search_written_before_capacity_ii_still_loads_and_reports(tmp_path: Path) -> None:
    folder = classify_search().write(tmp_path)
    new_probe_fields = ("window_s", "cannot_pass")
    settings = json.loads((folder / SEARCH_FILE).read_text())
    old_settings = _strip(settings, ("budget_s", "min_queries"))
    (folder / SEARCH_FILE).write_text(json.dumps(old_settings))
    result = _strip(
        json.loads((folder / CAPACITY_FILE).read_text()),
        ("stop_detail", "spent_s"),
    )
    result["probes"] = [_strip(probe, new_probe_fields) for probe in result["probes"]]
    (folder / CAPACITY_FILE).write_text(json.dumps(result))
    lines = [json.dumps(probe) for probe in result["probes"]]
    (folder / PROBES_FILE).write_text("\n".join(lines) + "\n")
    assert "window_s" not in (folder / CAPACITY_FILE).read_text()

    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    load_search(connection, folder)
    assert connection.execute(
        "SELECT stop_detail, spent_s, budget_s, min_queries FROM capacity_searches"
    ).fetchall() == [(None, None, None, None)]
    assert connection.execute(
        "SELECT count(*), count(window_s), bool_or(cannot_pass) FROM capacity_probes"
    ).fetchall() == [(len(result["probes"]), 0, False)]
    assert connection.execute("SELECT stop_detail, spent_s FROM capacity").fetchall() == [
        (None, None)
    ]
    text = report_markdown.write_search_report(folder).read_text()
    assert "- **stop reason**: converged\n- **spent**: -\n" in text


@pytest.mark.slow
def test_a_version_6_warehouse_gains_the_capacity_ii_columns(tmp_path: Path, db_path: Path) -> None:
    load_capacity_dirs([classify_search().write(tmp_path / "out")], db_path)
    connection = duckdb.connect(str(db_path))
    try:  # back to version 6: the capacity tables without the columns of version 7
        for table, column in (
            ("capacity_searches", "stop_detail"),
            ("capacity_searches", "spent_s"),
            ("capacity_searches", "budget_s"),
            ("capacity_searches", "min_queries"),
            ("capacity_probes", "window_s"),
            ("capacity_probes", "cannot_pass"),
        ):
            connection.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        for table in ("ab_blocks", "ab_sessions"):  # version 8's
            connection.execute(f"DROP TABLE {table}")
        connection.execute("DELETE FROM schema_info WHERE version >= 7")
        connection.execute("INSERT INTO schema_info VALUES (6, 'collobench 6', now())")
        connection.execute("UPDATE summaries_version SET views_sha256 = 'version 6'")
    finally:
        connection.close()
    said: list[str] = []
    load_runs([single_pipeline_run(tmp_path / "runs").write()], db_path, notify=said.append)
    current = migrations.CURRENT_VERSION
    assert said == [f"{db_path}: upgraded the warehouse schema from version 6 to {current}"]
    fresh = tmp_path / "fresh.duckdb"
    load_capacity_dirs([slow_search().write(tmp_path / "out")], fresh)
    assert table_columns(db_path) == table_columns(fresh)
    # The search loaded before: new columns NULL, cannot_pass false, the view answers.
    _, probes = run_query(db_path, "SELECT count(*), count(window_s), bool_or(cannot_pass) "
                          "FROM capacity_probes")  # fmt: skip
    assert probes == [(len(classify_search().probes), 0, False)]
    _, view = run_query(db_path, "SELECT met_probes, stop_detail, spent_s FROM capacity")
    assert view == [(3, None, None)]


def test_the_plot_draws_the_unloaded_probe_as_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unloaded probe (rate 0) is a dashed line at its p99, not a point at x = 0 on the log
    axis; a search with no search probe at all (infeasible at once) still plots."""
    from analysis.capacity import figures

    drawn: list[Any] = []
    save = figures._save

    def keep_axis(figure: Any, path: Path) -> Path:
        drawn.append(figure.axes[0])
        return save(figure, path)

    monkeypatch.setattr(figures, "_save", keep_axis)
    search = slow_search()
    report = report_markdown.write_search_report(search.write(tmp_path)).read_text()
    axis = drawn[-1]
    points = [offset for group in axis.collections for offset in group.get_offsets()]
    assert points and all(x > 0 for x, _ in points)  # every marker has a rate
    assert sorted(x for x, _ in points) == [3.4, 6.8]  # the two search probes
    unloaded = [line for line in axis.get_lines() if line.get_label() == "unloaded p99 (met)"]
    assert len(unloaded) == 1 and list(unloaded[0].get_ydata()) == [1300.0, 1300.0]
    assert f"undecidable: {UNDECIDABLE_DETAIL}" in report
    assert "- **spent**: 14.0 min of a 15 min budget" in report
    assert "| 3 | unloaded | 0 | 150 | 3 | 459 | 0 | met | 1300 |" in report
    assert "| undecided (cannot pass) |" in report

    hopeless = Search(
        search_id="hopeless-unloaded",
        probes=[
            Probe(0.0, None, 0, 0, None, kind="ceiling"),
            Probe(0.0, "missed", 459, 459, 86.0, kind="unloaded", window_s=60.0),
        ],
        certified_qps=None,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(0.0, None),
        stop_reason="infeasible",
        ceiling_qps=None,
        stop_detail="the unloaded p99 misses the SLO",
    )
    report_markdown.write_search_report(hopeless.write(tmp_path))
    assert not drawn[-1].collections  # no probe point at all
    labels = [line.get_label() for line in drawn[-1].get_lines()]
    assert labels == ["unloaded p99 (missed)", "SLO: p99 <= 50 ms"]

"""The report catalogue (analysis.reports.catalogue) against the views on a real loaded run: every
column it names exists, every view is catalogued or named as not reported, and any disagreement
is an error that names the view and the column."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import duckdb
import pytest

from analysis.history.compare import COLUMNS as COMPARE_COLUMNS
from analysis.history.compare import COMPARISON_MARKDOWN, COMPARISON_TERMINAL
from analysis.reports import catalogue as report_catalogue
from analysis.reports import report_entries
from analysis.reports.catalogue import (
    AFTER_RUN,
    BY_VIEW,
    CATALOGUE,
    PLOTS,
    check_columns,
    check_views,
)
from analysis.reports.report import report, warehouse_views
from analysis.reports.report_entries import (
    MARKDOWN_NUMBERS,
    TERMINAL_NUMBERS,
    ReportCatalogueError,
    cell_columns,
)
from analysis.reports.report_file import _DRAW
from analysis.reports.views_not_per_run import NOT_REPORTED
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from tests.analysis.runs import collocated_run


@pytest.fixture(scope="module")
def _loaded_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collocated run loaded once for the module (1-2 s); each test gets a copy below."""
    folder = tmp_path_factory.mktemp("report_catalogue")
    db_path = folder / "warehouse" / "results.duckdb"
    load_runs([collocated_run(folder).write()], db_path)
    return db_path


@pytest.fixture
def loaded_db(_loaded_once: Path, tmp_path: Path) -> Path:
    """A copy of the loaded warehouse of its own (a test here adds a view to it)."""
    copy = tmp_path / "warehouse"
    shutil.copytree(_loaded_once.parent, copy)
    return copy / _loaded_once.name


def test_every_catalogue_column_is_in_its_view_on_a_loaded_run(loaded_db: Path) -> None:
    connection = connect_read_only(loaded_db)
    try:
        for view in CATALOGUE:
            present = {row[0] for row in connection.execute(f"DESCRIBE {view.view}").fetchall()}
            assert view.columns() <= present, (view.view, sorted(view.columns() - present))
        check_views(warehouse_views(connection))  # every view catalogued or named unreported
    finally:
        connection.close()
    frames = report(loaded_db)
    assert list(frames) == [view.view for view in CATALOGUE]
    assert len(CATALOGUE) == 17 and all(view.terminal for view in CATALOGUE)


def test_a_column_the_view_does_not_produce_is_an_error_naming_both(
    loaded_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    throughput = BY_VIEW["throughput"]
    renamed = dataclasses.replace(throughput, terminal=(*throughput.terminal, "ok_queries_v2"))
    monkeypatch.setitem(BY_VIEW, "throughput", renamed)
    with pytest.raises(
        ReportCatalogueError, match=r"view 'throughput' has no column 'ok_queries_v2'"
    ):
        report(loaded_db)
    latency = BY_VIEW["latency"].columns()
    check_columns("latency", latency)
    with pytest.raises(
        ReportCatalogueError, match=r"^view 'latency' has no column 'latency_p90_ms' "
    ):
        check_columns("latency", latency - {"latency_p90_ms"})
    # a Markdown interval spec names its bounds: a renamed bound is an error too
    section = dataclasses.replace(
        throughput, report_md=report_entries.Section("t", (("q/s", "queries_per_s|lo|hi"),))
    )
    monkeypatch.setitem(BY_VIEW, "throughput", section)
    with pytest.raises(ReportCatalogueError, match=r"'throughput' has no column 'hi', 'lo'"):
        report(loaded_db, views=["throughput"])


def test_a_warehouse_view_with_no_catalogue_entry_is_an_error(loaded_db: Path) -> None:
    connection = duckdb.connect(str(loaded_db))
    try:
        connection.execute("CREATE VIEW queue_depth AS SELECT 1 AS run_id")
    finally:
        connection.close()
    with pytest.raises(
        ReportCatalogueError, match=r"no entry in analysis/reports/catalogue.py.*queue_depth"
    ):
        report(loaded_db)
    with pytest.raises(ReportCatalogueError, match="view 'queue_depth' has no entry"):
        report_catalogue.entry("queue_depth")


def test_a_catalogue_entry_with_no_view_is_an_error(
    loaded_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ghost = dataclasses.replace(BY_VIEW["energy"], view="energy_v0")
    monkeypatch.setitem(BY_VIEW, "energy_v0", ghost)
    with pytest.raises(ReportCatalogueError, match=r"names view.* the warehouse lacks: energy_v0"):
        report(loaded_db)
    present = set(BY_VIEW) - {"energy_v0"}
    with pytest.raises(ReportCatalogueError, match="energy_v0"):
        check_views(present)
    check_views(present | {"energy_v0"} | set(NOT_REPORTED) | {"tokens_from_rows"})


def test_the_catalogue_agrees_with_itself_and_with_its_readers() -> None:
    assert set(AFTER_RUN) == {view.view for view in CATALOGUE if view.after_run_title}
    assert set(_DRAW) == {plot.key for plot in PLOTS}
    assert set(COMPARISON_TERMINAL) <= set(COMPARE_COLUMNS)
    for view in CATALOGUE:
        for _, cell in (view.report_md.columns if view.report_md else ()) + (
            view.asset.columns if view.asset else ()
        ):
            parts = cell_columns(cell)
            assert len(parts) in (1, 3), cell
            if len(parts) == 3:  # x|x_ci_low|x_ci_high (a `_ms` unit kept last)
                assert "_ci_low" in parts[1] and "_ci_high" in parts[2], cell
    assert {view.view for view in CATALOGUE if view.asset} == {
        "throughput",
        "latency",
        "perf_per_watt",
        "contention",
    }


def test_the_regression_checks_comparison_table_reads_comparison_columns() -> None:
    read = [name for _, cell in COMPARISON_MARKDOWN for name in cell_columns(cell)]
    assert read and set(read) <= set(COMPARE_COLUMNS)


def test_number_formats() -> None:
    assert [TERMINAL_NUMBERS(v) for v in (None, math.nan, 0.123456, 2_500_000.4, 7, "x")] == [
        "-",
        "-",
        "0.1235",
        "2500000",
        "7",
        "x",
    ]
    assert TERMINAL_NUMBERS(math.inf) == "inf"
    assert [MARKDOWN_NUMBERS(v) for v in (-math.inf, 2_500_000.4, None)] == ["inf", "2.5e+06", "-"]

"""What the report catalogue (analysis/reports/catalogue.py) is made of, and its rules: an entry
per reported view (row order, terminal columns, report.md section, Dagster asset), the PNG plots,
how a table cell writes a number, and the lookups and checks that make a view or a column named
in one place but missing in the other an error (ReportCatalogueError), never a silent drop.

Pure Python (no DuckDB, pandas or matplotlib): the CLI and the Dagster definitions import the
catalogue at start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from analysis.warehouse.view_manifest import DEFINITION_SUFFIX
from stages.contracts.errors import InvalidInputError


class ReportCatalogueError(InvalidInputError, LookupError):
    """The report catalogue and the warehouse's views disagree (a view or a column), or the
    catalogue disagrees with itself."""


@dataclass(frozen=True)
class NumberFormat:
    """How a table cell writes a value: None and NaN as `missing`; a float with
    `significant_digits` significant digits, with no decimals at or above `fixed_from` in
    magnitude, and an infinity as `infinite` when set; anything else as str()."""

    significant_digits: int = 4
    fixed_from: float | None = None
    infinite: str | None = None
    missing: str = "-"

    def __call__(self, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return self.missing
        if not isinstance(value, float):
            return str(value)
        if self.infinite is not None and math.isinf(value):
            return self.infinite
        if self.fixed_from is not None and not abs(value) < self.fixed_from:
            return f"{value:.0f}"
        return f"{value:.{self.significant_digits}g}"


# Terminal tables (`collobench report`, `compare`): a count of nanoseconds or bytes reads whole.
TERMINAL_NUMBERS = NumberFormat(significant_digits=4, fixed_from=1e6)
# Markdown tables (report.md, Dagster metadata): +inf and -inf both read "inf".
MARKDOWN_NUMBERS = NumberFormat(significant_digits=4, infinite="inf")

# A Markdown column: (header, cell), the cell a column name or `x|x_ci_low|x_ci_high` for a
# value with its interval (analysis.reports.report_file.markdown_table).
MarkdownColumns = tuple[tuple[str, str], ...]


def names(text: str) -> tuple[str, ...]:
    """Column names written as one space-separated string (keeps the catalogue readable)."""
    return tuple(text.split())


def cell_columns(cell: str) -> tuple[str, ...]:
    """The view columns a Markdown cell spec reads (`x|low|high` reads three)."""
    return tuple(cell.split("|"))


@dataclass(frozen=True)
class Section:
    """A view as a Markdown table in report.md; with `rows_with`, only the rows where that
    column is set (the section is left out when none is)."""

    title: str
    columns: MarkdownColumns
    rows_with: str | None = None


@dataclass(frozen=True)
class Asset:
    """A view as a Dagster report asset (named after the view): its description, Markdown
    table, the plots (keys of PLOTS) shown inline, and the text shown when it has no rows."""

    description: str
    columns: MarkdownColumns
    plots: tuple[str, ...]
    empty_note: str = "No rows for this run."


@dataclass(frozen=True)
class ReportView:
    """One view reported per run (or, in CAPACITY_CATALOGUE, per `key`: a capacity search or
    region). `terminal` is what `collobench report` prints (its title is the view's name;
    `x_ci_low`/`x_ci_high` fold into x's cell); `after_run_title` titles the same columns
    after `collobench run` when set; `report_md` and `asset` when set."""

    view: str
    order_by: tuple[str, ...]
    terminal: tuple[str, ...]
    after_run_title: str | None = None
    report_md: Section | None = None
    asset: Asset | None = None
    key: str = "run_id"

    def columns(self) -> set[str]:
        """Every column of the view this entry names (order, terminal, Markdown)."""
        named = {term.split()[0] for term in self.order_by} | set(self.terminal)
        markdown = (self.report_md.columns if self.report_md else ()) + (
            self.asset.columns if self.asset else ()
        )
        for _, cell in markdown:
            named.update(cell_columns(cell))
        if self.report_md is not None and self.report_md.rows_with is not None:
            named.add(self.report_md.rows_with)
        return named


@dataclass(frozen=True)
class Plot:
    """A PNG report_file draws beside report.md (key, file name, title)."""

    key: str
    file_name: str
    title: str


@dataclass(frozen=True)
class ReportCatalogueRules:
    """Lookups and checks over the catalogue's tables: analysis/reports/catalogue.py (`file`)
    and analysis/reports/views_not_per_run.py (`other_file`), named in the messages. The tables are
    held, not copied: a test that patches an entry into `per_run` is seen by every check."""

    file: str
    other_file: str  # where per_key and not_reported are declared
    per_run: Mapping[str, ReportView]
    per_key: Mapping[str, ReportView]
    not_reported: Mapping[str, str]
    after_run: tuple[str, ...]
    plots: tuple[Plot, ...]

    def entry(self, view: str) -> ReportView:
        """The catalogue entry of `view` (per run, or per key: a capacity view);
        ReportCatalogueError when it has none."""
        found = self.per_run.get(view) or self.per_key.get(view)
        if found is None:
            raise ReportCatalogueError(f"view {view!r} has no entry in {self.file}")
        return found

    def check_columns(self, view: str, present: Iterable[str]) -> None:
        """ReportCatalogueError naming the view and each column the catalogue names for it
        that its SQL output (`present`) lacks."""
        missing = sorted(self.entry(view).columns() - set(present))
        if missing:
            raise ReportCatalogueError(
                f"view {view!r} has no column {', '.join(map(repr, missing))} "
                f"(named in {self.file})"
            )

    def check_views(self, warehouse_views: Iterable[str]) -> None:
        """ReportCatalogueError when a per-run view is not in the warehouse, or a warehouse
        view is neither catalogued, nor in NOT_REPORTED, nor a `<x>_from_rows` definition."""
        present = set(warehouse_views)
        absent = [view for view in self.per_run if view not in present]
        if absent:
            raise ReportCatalogueError(
                f"{self.file} names view(s) the warehouse lacks: {', '.join(absent)}"
            )
        known = set(self.per_run) | set(self.per_key) | set(self.not_reported)
        unnamed = sorted(view for view in present - known if not view.endswith(DEFINITION_SUFFIX))
        if unnamed:
            raise ReportCatalogueError(
                f"warehouse view(s) with no entry in {self.file} (CATALOGUE), "
                f"{self.other_file} (CAPACITY_CATALOGUE) or their view file's `not_reported` "
                f"(analysis/warehouse/view_manifest.py): {', '.join(unnamed)}"
            )

    def check_consistency(self, entries: int, keyed_entries: int) -> None:
        """The catalogue agrees with itself: one entry per view (`entries` and `keyed_entries`
        are the lengths of the tables the mappings were built from), AFTER_RUN names exactly
        the entries with an after_run_title, every asset's plots are in PLOTS."""
        keyed = set(self.per_key)
        if (
            len(self.per_run) != entries
            or len(keyed) != keyed_entries
            or set(self.per_run) & set(self.not_reported)
            or keyed & (set(self.per_run) | set(self.not_reported))
        ):
            raise ReportCatalogueError(f"{self.file}: a view is named twice")
        titled = {view.view for view in self.per_run.values() if view.after_run_title}
        if set(self.after_run) != titled or len(self.after_run) != len(titled):
            raise ReportCatalogueError(
                f"{self.file}: AFTER_RUN {self.after_run} != titled {titled}"
            )
        plots = {plot.key for plot in self.plots}
        for view in self.per_run.values():
            unknown = set(view.asset.plots if view.asset else ()) - plots
            if unknown:
                raise ReportCatalogueError(
                    f"{self.file}: {view.view} shows unknown plots {unknown}"
                )

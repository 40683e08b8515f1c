"""The figures of one A/B segment (`collobench ab`), read from its run directory.

A segment is an ordinary short run; it is loaded alone into an in-memory database with the
warehouse's own views, so a segment's p50 is exactly the p50 `collobench report` shows for that
run (`ab_segment.sql` says which figures and what rides along with them).
"""

from __future__ import annotations

from pathlib import Path

from analysis.reports.headline_figures import open_run_views
from analysis.warehouse.sql_files import sql_text
from stages.contracts.ab_segment import SegmentFigures

SEGMENT_TABLES = ("queries", "stage_events", "token_events", "calibration", "host_samples")
SEGMENT_VIEWS = ("run_history", "tokens", "host_load")
FINGERPRINT_FIELDS = (
    "machine_class",
    "spec_hash",
    "host",
    "collobench_version",
    "git_commit",
    "git_dirty",
    "python_version",
    "torch_version",
    "transformers_version",
    "cuda_version",
    "driver_version",
    "packages_sha256",
)
"""What a segment ran on, as run_history names it: the arms' comparison of these says where
they differ (`stages.ab.fingerprints`).."""


def segment_figures(run_dir: Path) -> SegmentFigures:
    """The segment's figures (empty when its run failed: run_history holds ok runs only)."""
    with open_run_views(Path(run_dir), SEGMENT_TABLES, SEGMENT_VIEWS) as connection:
        result = connection.execute(sql_text("ab_segment.sql"))
        names = [column[0] for column in result.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    values = {
        (str(row["pipeline"]), str(row["metric"])): float(row["value"])
        for row in rows
        if row["value"] is not None
    }
    scores = [row["calibration_score"] for row in rows if row["calibration_score"] is not None]
    foreign = [row["foreign_cpu_cores"] for row in rows if row["foreign_cpu_cores"] is not None]
    return SegmentFigures(
        values=values,
        higher_is_worse={str(row["metric"]): not row["higher_is_better"] for row in rows},
        calibration_score=min(scores) if scores else None,
        foreign_cpu_cores=max(foreign) if foreign else None,
        fingerprint={name: rows[0][name] for name in FINGERPRINT_FIELDS} if rows else {},
    )

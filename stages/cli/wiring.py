"""What the CLI hands the launcher: the phase summariser (the analysis views) and the MLflow
logger. The CLI is the one place where `stages` calls into `analysis` (lazily, per call)."""

from __future__ import annotations

from pathlib import Path

from stages.collocation.results import PhaseFigures


def log_to_mlflow(run_dir: Path, tracking_uri: str) -> str | None:
    """Record a finished run directory in MLflow; its MLflow run id."""
    from stages.cli.mlflow_log import log_run_to_mlflow  # mlflow takes seconds to import

    return log_run_to_mlflow(run_dir, tracking_uri)


def summarize_phase(
    run_dir: Path, trial: int, phase: str
) -> tuple[dict[str, PhaseFigures], list[str]]:
    """The launcher's phase summariser: each pipeline's figures from the analysis views
    (infinite percentiles as the string "inf", so the manifest stays JSON) with its SLO
    verdict, and the phase's foreign-load warnings."""
    from analysis.reports.headline_figures import headline_metrics, phase_warnings
    from analysis.reports.headline_figures import summarize_phase as summaries_of

    figures = {
        summary.pipeline: PhaseFigures(
            metrics={
                name: "inf" if value == float("inf") else value
                for name, value in headline_metrics(summary, finite_only=False).items()
            },
            slo_verdict=summary.slo_verdict,
        )
        for summary in summaries_of(run_dir, trial, phase)
    }
    return figures, phase_warnings(run_dir, trial, phase)

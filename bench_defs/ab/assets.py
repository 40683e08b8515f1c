"""The `ab_report` asset and the `ab_comparison` job: one paired A/B session of `collobench ab`,
launched from the Launchpad.

Materialising it runs `collobench ab ... --format json` (the command users run) in a Pipes child
in its own process group (`bench_defs.ab.runner`, started by `GroupPipesClient` as `capacity`
is), so cancelling the run ends both arms' workers. The asset reports the session's answer as
metadata: session_id, status, one line per figure (verdict, change % with its 95% interval, the
smallest change the session could have seen), blocks kept and dropped, the session folder and
the plot (`ab.png`, inline and as a path). Unpartitioned: each run is a new session. The job's
runs carry a device pool's tags, as `benchmark_job`'s do, so a session never shares the machine
with a benchmark of its pool.
"""

from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from bench_defs.core.image_metadata import image_markdown
from bench_defs.core.pools import check_run_pool, default_pool
from bench_defs.core.resources import CollobenchResource, GroupPipesClient
from bench_defs.core.specs import DEFAULT_DEVICE, run_tags

AB_GROUP = "ab"
AB_JOB = "ab_comparison"


class AbConfig(dg.Config):
    """Launchpad options of one A/B session, passed to `collobench ab`; a field left out keeps
    the CLI's default. Arms: `aa`, or `spec_b`, or two Pythons, or `repo` with two revisions."""

    spec: str = Field(
        description="Arm A's spec: a path, or a file name / stem in the specs folder."
    )
    spec_b: str | None = Field(default=None, description="Arm B's spec (same pipelines).")
    aa: bool = Field(default=False, description="Arm A against itself: measures the noise.")
    base_python: str | None = Field(default=None, description="Arm A's Python (another venv).")
    candidate_python: str | None = Field(default=None, description="Arm B's Python.")
    repo: str | None = Field(default=None, description="A git repository whose revisions are arms.")
    base: str | None = Field(default=None, description="Arm A's revision (with repo).")
    candidate: str | None = Field(default=None, description="Arm B's revision (with repo).")
    allow_dirty: bool = Field(default=False, description="Accept uncommitted changes in repo.")
    margin_pct: float = Field(default=5.0, description="Equivalence margin, +- %.")
    budget_min: float = Field(default=15.0, description="Stop after this many minutes.")
    looks: str = Field(default="12,24,36", description="Block counts of the planned looks.")
    overrides: list[str] = Field(
        default_factory=list,
        description="`--set` overrides for both arms, e.g. pipelines.0.loadgen.duration_s=5 "
        "(each segment's length).",
    )
    pipeline: str | None = Field(default=None, description="Judge only this pipeline.")
    metric: str | None = Field(default=None, description="Judge only this figure.")
    seed: int | None = Field(default=None, description="The session's seed (default random).")
    mlflow: bool | None = Field(
        default=None, description="--mlflow (true) or --no-mlflow (false); unset: the CLI's."
    )

    def cli_options(self) -> list[str]:
        """The `collobench ab` options after SPEC [SPEC_B] that these settings stand for."""
        options = ["--margin-pct", f"{self.margin_pct:g}", "--budget-min", f"{self.budget_min:g}"]
        options += ["--looks", self.looks]
        for flag, value in (
            ("--base-python", self.base_python),
            ("--candidate-python", self.candidate_python),
            ("--repo", self.repo),
            ("--base", self.base),
            ("--candidate", self.candidate),
            ("--pipeline", self.pipeline),
            ("--metric", self.metric),
            ("--seed", None if self.seed is None else str(self.seed)),
        ):
            if value is not None:
                options += [flag, value]
        for flag, given in (("--aa", self.aa), ("--allow-dirty", self.allow_dirty)):
            if given:
                options.append(flag)
        for override in self.overrides:
            options += ["--set", override]
        if self.mlflow is not None:
            options.append("--mlflow" if self.mlflow else "--no-mlflow")
        return options


def spec_path(collobench: CollobenchResource, spec: str) -> Path:
    """`spec` as a file: a path as given, else a name or stem in the specs folder; a Failure
    naming both places when neither holds it."""
    given = Path(spec).expanduser()
    candidates = [given, collobench.specs_path() / spec, collobench.specs_path() / f"{spec}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.absolute()
    raise dg.Failure(f"no spec {spec!r}: not a file, nor in {collobench.specs_path()}")


def ab_command(config: AbConfig, collobench: CollobenchResource) -> list[str]:
    """The Pipes child's command line: the runner around `collobench ab ... --format json`."""
    python = collobench.python_executable()
    specs = [str(spec_path(collobench, config.spec))]
    if config.spec_b is not None:
        specs.append(str(spec_path(collobench, config.spec_b)))
    cli = [python, "-m", "stages.cli", "ab", *specs, *config.cli_options(), "--format", "json"]
    return [python, "-m", "bench_defs.ab.runner", "--", *cli]


def _interval(pair: Any) -> str:
    low, high = pair if isinstance(pair, list | tuple) else (None, None)
    return "[{}, {}]".format(*(f"{x:+.1f}" if x is not None else "?" for x in (low, high)))


def figure_line(row: dict[str, Any]) -> str:
    """One figure as a line: `regressed -8.0% [-12.0, -4.0], mde 3.5%, 12 blocks`."""
    mde = row.get("mde_pct")
    shown_mde = f"{mde:.1f}%" if mde is not None else "inf"
    return (
        f"{row['verdict']} {row['change_pct']:+.1f}% {_interval(row.get('change_ci95'))}, "
        f"mde {shown_mde}, {row['blocks']} blocks"
    )


def verdict_markdown(rows: list[dict[str, Any]]) -> str:
    """The verdicts as a Markdown table, one row per figure."""
    lines = [
        "| pipeline | metric | verdict | change % [95%] | mde % | blocks |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        mde = row.get("mde_pct")
        lines.append(
            f"| {row['pipeline']} | {row['metric']} | {row['verdict']} | "
            f"{row['change_pct']:+.1f} {_interval(row.get('change_ci95'))} | "
            f"{f'{mde:.1f}' if mde is not None else 'inf'} | {row['blocks']} |"
        )
    return "\n".join(lines)


def session_metadata(rows: list[dict[str, Any]], session_dir: Path | None) -> dict[str, Any]:
    """The materialisation's metadata from the CLI's rows and the session's folder."""
    if not rows:
        raise dg.Failure("the session judged no figure: too few complete blocks (see the logs)")
    first = rows[0]
    metadata: dict[str, Any] = {
        "session_id": str(first["session_id"]),
        "status": str(first.get("status", "")),
        "phase": str(first.get("phase", "")),
        "blocks": int(max(row["blocks"] for row in rows)),
        "blocks_dropped": int(first.get("blocks_dropped", 0)),
        "verdicts": dg.MetadataValue.md(verdict_markdown(rows)),
        **{f"{row['pipeline']}/{row['metric']}": figure_line(row) for row in rows},
    }
    if session_dir is not None:
        metadata["session_dir"] = dg.MetadataValue.path(str(session_dir))
        plot = session_dir / "ab.png"
        if plot.is_file():
            metadata["plot_path"] = dg.MetadataValue.path(str(plot))
            metadata["plot"] = dg.MetadataValue.md(image_markdown(plot, "per-block changes"))
    return metadata


def session_answer(invocation: dg.PipesClientCompletedInvocation) -> dict[str, Any]:
    """The runner's one custom message (`bench_defs.ab.runner`): the rows and the folder."""
    messages = [m for m in invocation.get_custom_messages() if isinstance(m, dict)]
    if not messages:
        raise dg.Failure("collobench ab reported no verdicts (see the run's logs)")
    return messages[-1]


@dg.asset(
    group_name=AB_GROUP,
    kinds={"python"},
    description="One paired A/B session (`collobench ab`, in its own process group): "
    "metadata session_id, status, one line per figure (verdict, change % [95%], mde %), "
    "blocks, the session folder and the plot. Launchpad config: AbConfig.",
)
def ab_report(
    context: dg.AssetExecutionContext,
    config: AbConfig,
    collobench: CollobenchResource,
    pipes_client: GroupPipesClient,
) -> dg.MaterializeResult:
    pool = check_run_pool(context)  # an unknown pool fails here, before anything runs
    command = ab_command(config, collobench)
    context.log.info("A/B session: " + " ".join(command[4:]))
    invocation = pipes_client.run(context=context, command=command, env=collobench.child_env())
    answer = session_answer(invocation)
    folder = answer.get("session_dir")
    metadata = session_metadata(list(answer.get("rows") or []), Path(folder) if folder else None)
    return dg.MaterializeResult(metadata=metadata | {"gpu_pool": pool})


ab_comparison = dg.define_asset_job(
    AB_JOB,
    selection=dg.AssetSelection.assets(ab_report),
    # A session measures this machine as a benchmark does: it holds a device pool's slot, so
    # no benchmark or search of the pool runs beside it (the first pool unless tagged).
    tags=run_tags(DEFAULT_DEVICE, default_pool()),
    executor_def=dg.in_process_executor,
    description="One A/B session of `collobench ab` (asset `ab_report`). Launchpad config: "
    "ops.ab_report.config {spec, spec_b, aa, base_python, candidate_python, repo, base, "
    "candidate, margin_pct, budget_min, looks, overrides, pipeline, metric, seed, mlflow}.",
)

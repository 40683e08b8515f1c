"""The manifest's `startup` part (stages.rundir.manifest): how long a run took to get load
flowing, as stages.collocation.startup records it."""

from __future__ import annotations

from pydantic import Field

from stages.rundir.manifest_part import ManifestPart


class StartupPhase(ManifestPart):
    """One phase's start-up: seconds from the origin (`Startup.origin`) until each step."""

    trial: int
    phase: str
    pipelines: list[str]
    spawned_s: float | None = Field(None, description="Every worker process started.")
    ready_s: float | None = Field(
        None, description="Every worker prepared (imports, model loading) and waiting."
    )
    calibrated_s: float | None = Field(
        None,
        description="The calibration before the phase ended (and the environment probe and "
        "the samplers' first samples it waits for); None: no worker got ready.",
    )
    started_s: float | None = Field(
        None, description="The common start instant the barrier sent (the load's start)."
    )


class Startup(ManifestPart):
    """How long the run took to get load flowing, in seconds from `origin`; None: not (yet)
    reached, or not measured by the caller (a run started outside the CLI has no `cli_ready_s`
    nor `spec_loaded_s`)."""

    origin: str = Field(
        description="process_start: the process's exec (`collobench run`; /proc, to 10 ms) | "
        "launcher_start: the launcher's start (a run started from Dagster or a capacity search)"
    )
    origin_ns: int = Field(description="The origin on the monotonic clock of the tables.")
    cli_ready_s: float | None = Field(None, description="The command's code runs: imports done.")
    spec_loaded_s: float | None = Field(None, description="The spec validated.")
    launcher_s: float | None = Field(None, description="The launcher started.")
    environment_probed_s: float | None = Field(
        None, description="The environment probe ended (None: an earlier run's was reused)."
    )
    first_measured_query_s: float | None = Field(
        None,
        description="The first phase's earliest measured (not warm-up) query's scheduled "
        "time, read from `queries` at the end; None while running or without one.",
    )
    phases: list[StartupPhase] = Field(
        default_factory=list, description="Per phase, in run order: spawn, ready, calibration."
    )

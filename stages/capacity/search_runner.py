"""One capacity search end to end: its folder (`SearchStore`), the controller's loop
(`run_search`) and real probes (`ProbeExecutor`). Every finished probe is on disk before the
next starts, so a search that is killed or interrupted resumes from `probes.jsonl` (the
controller is a function of the recorded probes) and loses nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stages.capacity.controller import run_search
from stages.capacity.probe_executor import ProbeExecutor
from stages.capacity.probe_plan import search_plan
from stages.capacity.probe_spec import check_searchable
from stages.capacity.search_services import SearchServices, search_services
from stages.capacity.store import SearchStore
from stages.collocation.launcher import LauncherInterruptedWithResult
from stages.contracts.capacity_files import CapacityResult, ProbeRecord, SearchSettings
from stages.contracts.errors import InvalidInputError
from stages.contracts.slo_verdict import SloRule
from stages.validation.loading import LoadedSpec


class SearchMismatch(InvalidInputError, ValueError):
    """A resumed search whose recorded settings or spec differ from the ones given."""


@dataclass
class SearchRunOptions:
    out_dir: Path
    cache_dir: Path
    rule: SloRule
    verdict_latencies: Callable[[Path], dict[str, list[float]]]
    mlflow_uri: str | None = None
    log_search: Callable[[Path, str], str | None] | None = None
    progress: Callable[[str], None] | None = None


def search_dir_of(options: SearchRunOptions, search_id: str) -> Path:
    return Path(options.out_dir) / search_id


def run_capacity_search(
    loaded: LoadedSpec, settings: SearchSettings, options: SearchRunOptions
) -> CapacityResult:
    """Create or resume `<out_dir>/<search_id>/` and search until the controller stops; the
    result is also written to capacity.json (and logged to MLflow when asked). Ctrl-C (or
    SIGTERM) during a probe raises KeyboardInterrupt, every earlier probe kept."""
    check_searchable(loaded, settings)
    store = SearchStore(search_dir_of(options, settings.search_id))
    probes = _resume(store, settings)
    with search_services(loaded, store.search_dir / "services") as services:
        result = _search(loaded, settings, options, store, probes, services)
    if options.log_search is not None and options.mlflow_uri:
        mlflow_run_id = options.log_search(store.search_dir, options.mlflow_uri)
        if mlflow_run_id and options.progress is not None:
            options.progress(f"mlflow run: {mlflow_run_id} ({options.mlflow_uri})")
    return result


def _search(
    loaded: LoadedSpec,
    settings: SearchSettings,
    options: SearchRunOptions,
    store: SearchStore,
    probes: list[ProbeRecord],
    services: SearchServices,
) -> CapacityResult:
    """The controller's loop over real probes; the result written to capacity.json."""
    executor = ProbeExecutor(
        loaded=loaded,
        settings=settings,
        probe_runs_dir=store.probe_runs_dir,
        cache_dir=options.cache_dir,
        rule=options.rule,
        verdict_latencies=options.verdict_latencies,
        next_index=len(probes),
        services=services,
    )

    def on_probe(probe: ProbeRecord) -> None:
        store.append_probe(probe)
        if options.progress is not None:
            options.progress(probe_line(probe))
            if probe.kind == "ceiling":  # the rates, so the windows, are known now
                options.progress(search_plan(settings, [*probes, probe]).line(settings))

    if options.progress is not None:
        plan = search_plan(settings, probes).line(settings)
        options.progress(plan if not probes else f"resumed after {len(probes)} probes; {plan}")

    try:
        result = run_search(settings, executor, probes, on_probe)
    except LauncherInterruptedWithResult as interrupted:  # Ctrl-C or SIGTERM during a probe
        raise KeyboardInterrupt(f"{interrupted}; recorded probes kept") from interrupted
    store.write_result(result)
    return result


def _resume(store: SearchStore, settings: SearchSettings) -> list[ProbeRecord]:
    """The probes recorded so far (none for a new search, whose settings are written now);
    a recorded search must have been asked the same question of the same spec."""
    if not store.exists():
        store.probe_runs_dir.mkdir(parents=True, exist_ok=True)
        store.write_settings(settings)
        return []
    recorded = store.read_settings()
    if recorded != settings:
        differing = sorted(
            name
            for name in SearchSettings.model_fields
            if getattr(recorded, name) != getattr(settings, name)
        )
        raise SearchMismatch(
            f"search {settings.search_id} was started with other settings "
            f"({', '.join(differing)} differ)"
        )
    return store.read_probes()


def probe_line(probe: ProbeRecord) -> str:
    """One line per finished probe: what ran and how it fared."""
    if probe.kind == "ceiling":
        throughput = "-" if probe.throughput_qps is None else f"{probe.throughput_qps:.1f} q/s"
        head = f"probe {probe.index}: ceiling (closed loop) seed {probe.seed}: {throughput}"
    elif probe.kind == "unloaded":
        head = (
            f"probe {probe.index}: unloaded (one query at a time): {probe.verdict}, "
            f"p99 {_ms(probe.p99_ms)}, {probe.over_slo}/{probe.queries} over SLO"
        )
    else:
        flag = " (flagged: undecided at every look)" if probe.flagged else ""
        head = (
            f"probe {probe.index}: {probe.rate:.2f} q/s seed {probe.seed}{_window(probe)}: "
            f"{probe.verdict}{flag}, p99 {_ms(probe.p99_ms)}, "
            f"{probe.over_slo}/{probe.queries} over SLO"
        )
    return head + (f" [{probe.abort_reason}]" if probe.abort_reason else "")


def _window(probe: ProbeRecord) -> str:
    confirming = ", confirming" if probe.confirming else ""
    return "" if probe.window_s is None else f" ({probe.window_s:.0f} s window{confirming})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"

"""One SLO everywhere: `capacity --slo-ms X --percentile Q` judges every searched pipeline by X at
Q in each place that judges or reports a probe: the probe's spec (so the live over-SLO count
that stops a probe early), its manifest, the verdicts, capacity.json, the warehouse and the
plot's labels. The spec's own slo_ms (5 ms on a 5 ms sleep: every query over it) would abort
every probe."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from matplotlib import pyplot

from analysis.capacity import figures
from analysis.capacity.file_reader import read_search
from analysis.reports.headline_figures import verdict_latencies
from stages.capacity.clustering import design_effect, effective_counts
from stages.capacity.controller import ProbeRequest
from stages.capacity.probe_executor import ProbeExecutor
from stages.capacity.probe_spec import probe_spec
from stages.capacity.sequential import LOOKS, first_look_queries, look_confidence, look_queries
from stages.cli.mlflow_capacity import search_params
from stages.contracts.capacity_files import CapacityResult, ProbeKind, SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule, max_passing_over_slo
from stages.validation.loading import LoadedSpec, validate_document
from tests.analysis.capacity_dirs import classify_search

SPEC_SLO_MS = 5.0
SEARCH_SLO_MS = 50.0
PERCENTILE = 0.9
PROBE_S = 3.0
RULE = LoadgenSloRule()
RAY = {"ray": {"target": 10.0, "busy": 4.0}, "ray_slo_ms": {"target": 25.0, "busy": 90.0}}
"""A region ray's settings: each pipeline's rate per unit of scale, and its own SLO."""
ABORT_COUNT = re.compile(r"cannot pass: (\d+) over SLO > (-?\d+) allowed by the last look")


def three_pipelines() -> LoadedSpec:
    """target (SLO 30), busy (SLO 80) and quiet (no SLO), all open loop."""

    def pipeline(name: str, slo_ms: float | None) -> dict[str, Any]:
        loadgen = {"type": "server", "rate": 10, "duration_s": 10, "slo_ms": slo_ms}
        return {"name": name, "loadgen": loadgen, "stages": [{"id": "s", "type": "noop"}]}

    pipelines = [pipeline("target", 30), pipeline("busy", 80), pipeline("quiet", None)]
    return validate_document({"name": "three", "pipelines": pipelines})


def settings(**fields: Any) -> SearchSettings:
    base = {"search_id": "s", "pipeline": "target", "slo_ms": 70, "probe_s": 4, "min_rate": 1}
    return SearchSettings.model_validate(base | fields)


def probe_slos(
    loaded: LoadedSpec, request: ProbeRequest, search: SearchSettings
) -> dict[str, float | None]:
    probe = probe_spec(loaded, request, search)
    return {pipeline.name: pipeline.loadgen.slo_ms for pipeline in probe.spec.pipelines}


@pytest.mark.parametrize("kind", ["search", "ceiling"])
def test_the_target_runs_at_the_searchs_slo_and_co_runners_at_their_own(kind: ProbeKind) -> None:
    loaded = three_pipelines()
    search = settings(**{"with": {"busy": 3.0, "quiet": 2.0}})
    request = ProbeRequest(kind, 20.0, 0, False)
    assert probe_slos(loaded, request, search) == {"target": 70, "busy": 80, "quiet": None}
    overrides = probe_spec(loaded, request, search).overrides
    assert "pipelines.target.loadgen.slo_ms=70.0" in overrides
    assert not [o for o in overrides if "slo_ms" in o and not o.startswith("pipelines.target")]


def test_a_rays_pipelines_run_at_their_own_slos() -> None:
    loaded = three_pipelines()
    ray = settings(pipeline="target+busy", slo_ms=25, **RAY)
    request = ProbeRequest("search", 0.5, 0, False)
    assert probe_slos(loaded, request, ray) == {"target": 25, "busy": 90}
    without_own = ray.model_copy(update={"ray_slo_ms": {"target": 25.0}})
    assert probe_slos(loaded, request, without_own) == {"target": 25, "busy": 25}


def test_mlflow_records_each_ray_pipelines_slo_and_the_searched_percentile() -> None:
    ray = settings(pipeline="target+busy", slo_ms=25, percentile=0.9, **RAY)
    params = search_params(ray)
    assert (params["slo_ms"], params["percentile"]) == ("25.0", "0.9")
    assert json.loads(params["ray_slo_ms"]) == {"target": 25.0, "busy": 90.0}
    assert "ray_slo_ms" not in search_params(settings())


@pytest.mark.parametrize(
    "search",
    [
        settings(**{"with": {"busy": 3.0, "quiet": 2.0}}),
        settings(pipeline="target+busy", slo_ms=25, **RAY),
    ],
)
def test_the_executor_judges_each_pipeline_by_the_slo_its_probe_counts_by(
    search: SearchSettings, tmp_path: Path
) -> None:
    loaded = three_pipelines()
    executor = ProbeExecutor(loaded, search, tmp_path, tmp_path, RULE, verdict_latencies)
    running = probe_slos(loaded, ProbeRequest("search", 20.0, 0, False), search)
    judged = {name: executor._slo_ms(name) for name in running}  # inf: no SLO, no verdict
    assert judged == {name: slo or float("inf") for name, slo in running.items()}


def test_the_search_plot_names_the_percentile_it_plots_and_the_one_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = classify_search().write(tmp_path)
    result = json.loads((folder / "capacity.json").read_text())
    (folder / "capacity.json").write_text(json.dumps(result | {"percentile": 0.9}))
    drawn: list[Any] = []
    monkeypatch.setattr(figures, "_save", lambda figure, path: drawn.append(figure))
    figures.plot_search(read_search(folder), folder / "plot.png")
    (axis,) = drawn[0].axes
    pyplot.close(drawn[0])
    assert axis.get_ylabel() == "p99 latency (ms, log)"  # the probes' p99_ms, as recorded
    assert "SLO: p90 <= 50 ms" in [text.get_text() for text in axis.get_legend().get_texts()]


def sleeper_spec(folder: Path) -> Path:
    loadgen = {
        "type": "server",
        "rate": 50,
        "slo_ms": SPEC_SLO_MS,
        "on_full": "backlog",
        "queue_depth": 10_000,
        "duration_s": PROBE_S,
        "timeout_s": 30,
    }
    document = {
        "name": "slo-override",
        "seed": 5,
        "telemetry": {"gpu": {"enabled": False}},
        "pipelines": [
            {
                "name": "sleeper",
                "loadgen": loadgen,
                "stages": [{"id": "nap", "type": "sleep", "config": {"ms": 5}}],
            }
        ],
    }
    path = folder / "sleeper.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run_search(tmp_path: Path) -> tuple[CapacityResult, Path]:
    """`collobench capacity` as a user runs it, --slo-ms and --percentile unlike the spec's."""
    flags = ["--pipeline", "sleeper", "--slo-ms", str(SEARCH_SLO_MS)]
    flags += ["--percentile", str(PERCENTILE), "--max-probes", "6", "--probe-s", str(PROBE_S)]
    flags += ["--no-mlflow", "--search-id", "override", "--out", str(tmp_path / "out")]
    flags += ["--db", str(tmp_path / "warehouse.duckdb")]
    command = [sys.executable, "-m", "stages.cli", "capacity", str(sleeper_spec(tmp_path))]
    done = subprocess.run(
        [*command, *flags], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result_path = tmp_path / "out" / "override" / "capacity.json"
    return CapacityResult.model_validate_json(result_path.read_text()), tmp_path


def check_probe(probe: Any, latencies: list[float]) -> None:
    """The record's counts and verdict are the search's SLO and percentile on its latencies,
    and an early stop was one they justify."""
    flags = [latency > SEARCH_SLO_MS for latency in latencies]
    assert probe.over_slo == sum(flags) and probe.queries == len(flags)
    stopped = ABORT_COUNT.search(probe.abort_reason or "")
    if stopped is not None:
        live, allowed = (int(group) for group in stopped.groups())
        # A stage may count what its rate's last look allows, less its earlier stages' count.
        planned = int(probe.rate * (probe.window_s or PROBE_S))
        last_look = max(look_queries(first_look_queries(PERCENTILE), LOOKS), planned)
        assert allowed <= max_passing_over_slo(last_look, PERCENTILE, look_confidence(LOOKS))
        assert probe.over_slo >= live > allowed  # every query the monitor saw was over 50 ms
    elif probe.abort_reason is None:
        counted = effective_counts(len(flags), sum(flags), design_effect(flags))
        assert probe.verdict == RULE.verdict(*counted, PERCENTILE)


def check_manifest(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert f"pipelines.sleeper.loadgen.slo_ms={SEARCH_SLO_MS}" in manifest["overrides"]
    (pipeline,) = manifest["spec"]["pipelines"]
    assert pipeline["loadgen"]["slo_ms"] == SEARCH_SLO_MS


@pytest.mark.spawns
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_search_judges_every_probe_by_the_slo_ms_and_percentile_it_was_given(
    tmp_path: Path,
) -> None:
    result, folder = run_search(tmp_path)

    assert (result.slo_ms, result.percentile) == (SEARCH_SLO_MS, PERCENTILE)
    searched = [probe for probe in result.probes if probe.kind == "search"]
    assert searched, result.probes
    for probe in result.probes:
        assert probe.run_dir is not None
        check_manifest(Path(probe.run_dir))
    for probe in searched:
        latencies = verdict_latencies(Path(str(probe.run_dir)))["sleeper"]
        assert all(latency > SPEC_SLO_MS for latency in latencies)  # the spec's SLO: all over
        check_probe(probe, latencies)
    assert any(probe.verdict == "met" for probe in searched), searched
    assert result.certified_qps is not None

    connection = duckdb.connect(str(folder / "warehouse.duckdb"), read_only=True)
    try:
        rows = connection.execute(
            "SELECT slo_ms, percentile, met_probes FROM capacity WHERE search_id = 'override'"
        ).fetchall()
        probes = connection.execute(
            "SELECT probe_index, over_slo, verdict FROM capacity_probes "
            "WHERE search_id = 'override' ORDER BY probe_index"
        ).fetchall()
    finally:
        connection.close()
    met = sum(probe.verdict == "met" for probe in searched)
    assert rows == [(SEARCH_SLO_MS, PERCENTILE, met)]
    assert probes == [(probe.index, probe.over_slo, probe.verdict) for probe in result.probes]

"""Energy that compares like with like: whole load windows only (finding 13), energy per query
rather than joules (finding 12), and the measured idle baseline, on run directories built with
known numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder, one, rows_of
from tests.analysis.runs import BASE_NS, collocated_run

TEN_S = 10 * SECOND_NS
HALF_S = 500 * MS_NS


def constant_power(
    run: RunBuilder,
    trial: int,
    phase: str,
    first_ns: int,
    last_ns: int,
    power_w: float,
    gpu: int | None = None,
) -> None:
    """One sampler's cumulative series at `power_w`, every 0.5 s from first_ns to last_ns,
    counting from 0 J at its first sample (as every sampler does)."""
    count = (last_ns - first_ns) // HALF_S + 1
    values: list[float | None] = [power_w * index * 0.5 for index in range(count)]
    run.energy_series(
        trial,
        phase,
        first_ns,
        values,
        "rapl" if gpu is None else "nvml_counter",
        gpu=gpu,
        period_ns=HALF_S,
    )


def test_a_window_covered_in_part_gives_no_energy(tmp_path: Path, db_path: Path) -> None:
    """Finding 13. Two runs at 10 W over the window [0, 10] s with 100 ok queries: 100 J and
    1 query/J. In `late` the sampler's first sample comes at 2.5 s; clamping that edge to it
    measured 75 J and 1.33 queries/J (+33%) with nothing shown. Now the late window has no
    energy figure and says how much of it was spanned (0.75); the covered one is unchanged."""
    covered = RunBuilder(tmp_path, "20260201-000000-covered", {"a": "server"})
    covered.uniform_queries(0, "solo", "a", 100, TEN_S, start_ns=BASE_NS)
    constant_power(covered, 0, "solo", BASE_NS - SECOND_NS, BASE_NS + 12 * SECOND_NS, 10.0)
    late = RunBuilder(tmp_path, "20260201-000001-late", {"a": "server"})
    late.uniform_queries(0, "solo", "a", 100, TEN_S, start_ns=BASE_NS)
    constant_power(
        late, 0, "solo", BASE_NS + 2 * SECOND_NS + HALF_S, BASE_NS + 12 * SECOND_NS, 10.0
    )
    load_runs([covered.write(), late.write()], db_path)

    whole = one(db_path, f"SELECT * FROM perf_per_watt WHERE run_id = '{covered.run_id}'")
    assert whole["energy_j"] == pytest.approx(100.0)
    assert (whole["window_covered"], whole["coverage"]) == (True, 1.0)
    assert whole["queries_per_j"] == pytest.approx(1.0)
    assert whole["energy_source"] == "rapl"

    part = one(db_path, f"SELECT * FROM energy WHERE run_id = '{late.run_id}'")
    assert part["energy_j"] is None and part["energy_source"] is None
    assert part["window_covered"] is False
    assert part["coverage"] == pytest.approx(0.75)
    assert part["measured_s"] == pytest.approx(7.5)
    assert part["samples"] == 16  # 2.5 .. 10 s: usable samples inside, yet no figure
    ppw = one(db_path, f"SELECT * FROM perf_per_watt WHERE run_id = '{late.run_id}'")
    assert ppw["queries_per_j"] is None and ppw["j_per_query"] is None
    assert ppw["coverage"] == pytest.approx(0.75)


def test_an_end_the_sampler_missed_gives_no_energy(tmp_path: Path, db_path: Path) -> None:
    """The other edge: the sampler stopped at 8 s of a [0, 10] s window (coverage 0.8)."""
    run = RunBuilder(tmp_path, "20260201-000002-early", {"a": "server"})
    run.uniform_queries(0, "solo", "a", 100, TEN_S, start_ns=BASE_NS)
    constant_power(run, 0, "solo", BASE_NS - SECOND_NS, BASE_NS + 8 * SECOND_NS, 10.0)
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM energy")
    assert (row["energy_j"], row["window_covered"]) == (None, False)
    assert row["coverage"] == pytest.approx(0.8)


def time_sliced_run(
    root: Path,
    run_id: str,
    collocated_queries: int,
    collocated_w: float,
    idle_w: float | None = None,
) -> RunBuilder:
    """Pipelines a and b on one host: each solo baseline does 100 ok queries in 10 s at 10 W
    (100 J, 1 J/query); collocated, each does `collocated_queries` in 10 s at `collocated_w`.
    With `idle_w`, an idle baseline of 4 s at that power comes first (phase 'idle', trial 0)."""
    run = RunBuilder(root, run_id, {"a": "server", "b": "server"})
    starts = {"a": BASE_NS, "b": BASE_NS + 20 * SECOND_NS}
    together = BASE_NS + 40 * SECOND_NS
    for pipeline, start_ns in starts.items():
        run.uniform_queries(0, "solo", pipeline, 100, TEN_S, start_ns=start_ns)
        constant_power(run, 0, "solo", start_ns - SECOND_NS, start_ns + 11 * SECOND_NS, 10.0)
    for pipeline in starts:
        run.uniform_queries(0, "collocated", pipeline, collocated_queries, TEN_S, together)
    constant_power(
        run, 0, "collocated", together - SECOND_NS, together + 11 * SECOND_NS, collocated_w
    )
    if idle_w is not None:
        constant_power(run, 0, "idle", BASE_NS - 10 * SECOND_NS, BASE_NS - 6 * SECOND_NS, idle_w)
    return run


def test_equal_energy_per_query_is_no_saving(tmp_path: Path, db_path: Path) -> None:
    """Finding 12. Time-sliced, each pipeline does half its solo work collocated at the same
    10 W: 1 J/query on both sides. Joules alone (200 J solo vs 100 J together, what
    energy_saved_j took) read as a 50% saving; per query the ratio is 1.0, and the halved work
    is flagged."""
    run = time_sliced_run(
        tmp_path, "20260202-000000-sliced", collocated_queries=50, collocated_w=10.0
    )
    load_runs([run.write()], db_path)
    phases = rows_of(db_path, "SELECT phase, sum(energy_j) AS j FROM energy GROUP BY phase")
    joules = {row["phase"]: row["j"] for row in phases}
    assert joules == {"solo": pytest.approx(200.0), "collocated": pytest.approx(100.0)}
    assert 1 - joules["collocated"] / joules["solo"] == pytest.approx(0.5)  # the old "saving"

    row = one(db_path, "SELECT * FROM energy_comparison")
    assert (row["run_id"], row["trial"]) == (run.run_id, 0)
    assert row["solo_energy_j"] == pytest.approx(200.0)
    assert (row["solo_ok_queries"], row["collocated_ok_queries"]) == (200, 100)
    assert row["solo_j_per_query"] == pytest.approx(1.0)
    assert row["collocated_energy_j"] == pytest.approx(100.0)
    assert row["collocated_j_per_query"] == pytest.approx(1.0)
    assert row["energy_per_query_ratio"] == pytest.approx(1.0)
    assert row["work_differs"] is True
    assert row["energy_source"] == "rapl"
    assert row["dynamic_energy_per_query_ratio"] is None  # no idle baseline measured


def test_a_real_saving_per_query_with_equal_work(tmp_path: Path, db_path: Path) -> None:
    """Collocated, both pipelines keep their 100 queries each at 15 W: 150 J for 200 queries
    against 200 J solo, 0.75 J/query: ratio 0.75 and equal work. With a measured idle power of
    5 W the load itself cost 50 J per solo baseline (100 J, 0.5 J/query) and 100 J together
    (0.5 J/query): the whole saving was the idle floor shared, dynamic ratio 1.0."""
    run = time_sliced_run(
        tmp_path, "20260202-000001-shared", collocated_queries=100, collocated_w=15.0, idle_w=5.0
    )
    load_runs([run.write()], db_path)
    row = one(db_path, "SELECT * FROM energy_comparison")
    assert row["energy_per_query_ratio"] == pytest.approx(0.75)
    assert row["work_differs"] is False
    assert row["dynamic_solo_energy_j"] == pytest.approx(100.0)
    assert row["dynamic_solo_j_per_query"] == pytest.approx(0.5)
    assert row["dynamic_collocated_energy_j"] == pytest.approx(100.0)
    assert row["dynamic_collocated_j_per_query"] == pytest.approx(0.5)
    assert row["dynamic_energy_per_query_ratio"] == pytest.approx(1.0)

    idle = one(db_path, "SELECT * FROM idle_power")
    assert (idle["device"], idle["energy_source"]) == ("host", "rapl")
    assert idle["idle_power_w"] == pytest.approx(5.0)
    assert idle["idle_s"] == pytest.approx(4.0)
    solo_a = one(db_path, "SELECT * FROM perf_per_watt WHERE pipeline = 'a'")
    assert solo_a["idle_power_w"] == pytest.approx(5.0)
    assert solo_a["dynamic_energy_j"] == pytest.approx(50.0)
    assert solo_a["dynamic_j_per_query"] == pytest.approx(0.5)
    assert solo_a["dynamic_queries_per_j"] == pytest.approx(2.0)


def test_idle_rows_form_no_window(tmp_path: Path, db_path: Path) -> None:
    """The idle baseline's rows (phase 'idle', trial 0, like the first trial) are read only by
    idle_power: no window, no energy row, no host_load row, and the solo figures are those of
    the solo samples alone."""
    run = time_sliced_run(
        tmp_path, "20260202-000002-idle", collocated_queries=100, collocated_w=15.0, idle_w=5.0
    )
    load_runs([run.write()], db_path)
    for view in ("load_windows", "energy", "perf_per_watt", "host_load"):
        phases = {row["phase"] for row in rows_of(db_path, f"SELECT phase FROM {view}")}
        assert phases == {"solo", "collocated"}, view
    solo = rows_of(db_path, "SELECT energy_j FROM energy WHERE phase = 'solo'")
    assert [row["energy_j"] for row in solo] == [pytest.approx(100.0)] * 2


def test_energy_comparison_needs_every_figure(tmp_path: Path, db_path: Path) -> None:
    """A device measured in the collocated phase only (the GPU of collocated_run) leaves the
    solo sum incomplete: NULL, not the host alone against host plus GPU. A missing baseline
    leaves both the solo figures and work_differs unknown."""
    load_runs([collocated_run(tmp_path / "runs").write()], db_path)
    row = one(db_path, "SELECT * FROM energy_comparison")
    assert row["solo_energy_j"] is None and row["energy_per_query_ratio"] is None
    assert row["collocated_energy_j"] == 241.25  # host 41.25 J + GPU 200 J
    assert row["collocated_j_per_query"] == pytest.approx(241.25 / 900)
    assert row["work_differs"] is True  # a did 500 collocated vs 1000 alone
    assert row["energy_source"] == "nvml_counter+rapl"

    run = RunBuilder(tmp_path, "20260202-000003-nobase", {"a": "server", "b": "server"})
    run.uniform_queries(0, "solo", "a", 100, TEN_S, start_ns=BASE_NS)
    constant_power(run, 0, "solo", BASE_NS - SECOND_NS, BASE_NS + 11 * SECOND_NS, 10.0)
    together = BASE_NS + 20 * SECOND_NS
    run.uniform_queries(0, "collocated", "a", 100, TEN_S, start_ns=together)
    run.uniform_queries(0, "collocated", "b", 100, TEN_S, start_ns=together)
    constant_power(run, 0, "collocated", together - SECOND_NS, together + 11 * SECOND_NS, 10.0)
    load_runs([run.write()], db_path)
    row = one(db_path, f"SELECT * FROM energy_comparison WHERE run_id = '{run.run_id}'")
    assert row["solo_energy_j"] is None and row["solo_ok_queries"] is None
    assert row["work_differs"] is None
    assert row["collocated_j_per_query"] == pytest.approx(0.5)


def test_load_windows_end_at_the_last_scheduled_arrival(tmp_path: Path, db_path: Path) -> None:
    """A window ends at the last end of any measured query: ok ones by completion, a dropped
    one by its refusal, a `not_issued` one (load stopped before it was due) by its schedule.
    Warm-up queries stay outside; the collocated window spans both pipelines, pipeline NULL."""
    run = RunBuilder(tmp_path, "20260204-000000-windows", {"a": "server", "b": "server"})
    run.uniform_queries(0, "solo", "a", 10, TEN_S, start_ns=BASE_NS)
    extra = (
        ("dropped", 11 * SECOND_NS, 11 * SECOND_NS + MS_NS, False),
        ("not_issued", 12 * SECOND_NS, None, False),
        ("ok", -5 * SECOND_NS, 13 * SECOND_NS, True),  # warm-up, slow: left out
    )
    for offset, (status, scheduled_ns, issued_ns, warmup) in enumerate(extra):
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=100 + offset,
            scheduled_ns=BASE_NS + scheduled_ns,
            issued_ns=None if issued_ns is None else BASE_NS + issued_ns,
            completed_ns=BASE_NS + 13 * SECOND_NS if status == "ok" else None,
            status=status,
            samples=1,
            warmup=warmup,
        )
    together = BASE_NS + 20 * SECOND_NS
    run.uniform_queries(0, "collocated", "a", 10, TEN_S, start_ns=together)
    run.uniform_queries(0, "collocated", "b", 10, 2 * TEN_S, start_ns=together + SECOND_NS)
    load_runs([run.write()], db_path)
    found = {
        (row["phase"], row["pipeline"]): row
        for row in rows_of(db_path, "SELECT * FROM load_windows")
    }
    assert set(found) == {("solo", "a"), ("collocated", None)}
    solo = found[("solo", "a")]
    assert solo["window_start_ns"] == BASE_NS
    assert solo["window_end_ns"] == BASE_NS + 12 * SECOND_NS
    both = found[("collocated", None)]
    assert (both["window_start_ns"], both["window_s"]) == (together, 21.0)

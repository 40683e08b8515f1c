"""`nightly_benchmarks` through `build_schedule_context`: one run per spec that opts in."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.core.pools import POOL_TAG
from bench_defs.core.specs import SPEC_PARTITIONS
from bench_defs.schedules import nightly_benchmarks
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO


def evaluate(instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any]) -> Any:
    context = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=dt.datetime(2026, 1, 2, 2, 0, tzinfo=dt.UTC),
        resources=resources,
        repository_def=defs.get_repository_def(),
    )
    return nightly_benchmarks(context)


def test_runs_every_spec_that_opts_in(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    specs_dir: Path,
) -> None:
    write_spec(specs_dir, "nightly_one", tiny_spec("nightly_one", nightly=True))
    write_spec(specs_dir, "daytime", tiny_spec("daytime"))
    write_spec(specs_dir, "not_yet", tiny_spec("not_yet", nightly=True))  # no partition yet
    write_spec(specs_dir, "broken", "name: [\n")
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["nightly_one", "daytime", "broken"])
    requests = evaluate(instance, defs, resources)
    assert [(r.partition_key, r.run_key, r.tags[POOL_TAG]) for r in requests] == [
        ("nightly_one", "nightly:nightly_one:2026-01-02", "local")
    ]


def test_skips_when_no_spec_opts_in(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    specs_dir: Path,
) -> None:
    write_spec(specs_dir, "daytime", tiny_spec("daytime"))
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["daytime"])
    result = evaluate(instance, defs, resources)
    assert isinstance(result, dg.SkipReason) and "nightly: true" in str(result.skip_message)


@pytest.mark.spawns
def test_the_cron_comes_from_the_environment() -> None:
    code = "from bench_defs.schedules import nightly_benchmarks as s; print(s.cron_schedule)"
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "COLLOBENCH_NIGHTLY_CRON": "30 23 * * 1-5"},
        check=True,
    )
    assert completed.stdout.strip() == "30 23 * * 1-5"

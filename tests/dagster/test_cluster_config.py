"""The files `python -m bench_defs.cluster up` writes, without starting anything: the pools file
(written for N hosts, an existing one kept), dagster.yaml (a valid instance config: Postgres,
dagster-celery's run launcher, one run limit per pool, monitoring that never resumes a
benchmark, no telemetry, no onboarding dialog; with `--launcher default` Dagster's
DefaultRunLauncher and the same limits), workspace.yaml; `status` of a cluster that is not up;
and the one results folder (COLLOBENCH_RESULTS_DIR) every process gets."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config

from bench_defs.cluster import __main__ as cli
from bench_defs.cluster.instance_config import (
    host_names,
    run_launcher,
    write_instance,
    write_pools,
    write_workspace,
)
from bench_defs.core.pools import POOL_TAG, Pool, PoolsFile
from tests.helpers import REPO

URL = "postgresql://dagster@/dagster?host=/tmp/x&port=5432"


def test_pools_file_names_one_host_per_worker_and_keeps_an_existing_one(tmp_path: Path) -> None:
    path = tmp_path / "cluster" / "pools.yaml"
    pools = write_pools(path, 3)
    assert [(pool.name, pool.queue, pool.host, pool.devices) for pool in pools] == [
        ("host-a", "host-a", "host-a", 1),
        ("host-b", "host-b", "host-b", 1),
        ("host-c", "host-c", "host-c", 1),
    ]
    mine = PoolsFile(pools=[Pool(name="h100", queue="gpu-box", host="gpu-box", devices=8)])
    path.write_text(yaml.safe_dump(mine.model_dump()))
    assert write_pools(path, 2) == mine.pools
    assert host_names(28)[-2:] == ["host-27", "host-28"]


def test_instance_config_is_valid_and_routes_through_celery(tmp_path: Path) -> None:
    pools = [Pool(name="host-a", queue="host-a", host="host-a", devices=2)]
    write_instance(tmp_path, URL, "redis://127.0.0.1:6399/0", pools)
    config = dagster_instance_config(str(tmp_path))[0]
    assert config["storage"] == {"postgres": {"postgres_url": URL}}
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == (
        "bench_defs.cluster.launcher",
        "WatchedCeleryRunLauncher",
    )
    assert (
        launcher["config"]["broker"] == launcher["config"]["backend"] == "redis://127.0.0.1:6399/0"
    )
    limits = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limits == [{"key": POOL_TAG, "value": "host-a", "limit": 2}]
    # waiting runs start as soon as with the template instance (`make ui`), not every 5 s
    template = yaml.safe_load((REPO / "bench_defs" / "dagster.yaml").read_text())
    assert config["run_coordinator"]["config"] == template["run_queue"]
    assert config["run_coordinator"]["config"] == {"dequeue_interval_seconds": 1}
    assert config["run_monitoring"]["max_resume_run_attempts"] == 0
    assert config["telemetry"] == {"enabled": False}
    assert config["nux"] == {"enabled": False}


def test_default_launcher_config_keeps_the_pools_limits_and_monitoring(tmp_path: Path) -> None:
    pools = [
        Pool(name="host-a", queue="host-a", host="host-a", devices=1),
        Pool(name="h100", queue="gpu-box", host="gpu-box", devices=4),
    ]
    write_instance(tmp_path, URL, "redis://127.0.0.1:6399/0", pools, "default")
    config = dagster_instance_config(str(tmp_path))[0]
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster", "DefaultRunLauncher")
    assert launcher.get("config") in (None, {})
    module = importlib.import_module(launcher["module"])
    assert getattr(module, launcher["class"]).__name__ == "DefaultRunLauncher"
    assert config["concurrency"]["runs"]["tag_concurrency_limits"] == [
        {"key": POOL_TAG, "value": "host-a", "limit": 1},
        {"key": POOL_TAG, "value": "h100", "limit": 4},
    ]
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_monitoring"]["max_resume_run_attempts"] == 0
    with pytest.raises(ValueError, match="not one of celery, default"):
        run_launcher("k8s", "redis://x")
    with pytest.raises(SystemExit):
        cli.main(["up", "--launcher", "k8s"])


def test_workspace_points_at_the_code_server_on_loopback(tmp_path: Path) -> None:
    write_workspace(tmp_path / "workspace.yaml", 4321)
    entry = yaml.safe_load((tmp_path / "workspace.yaml").read_text())["load_from"][0]
    assert entry == {
        "grpc_server": {"host": "127.0.0.1", "port": 4321, "location_name": "collobench"}
    }


def test_status_of_a_cluster_not_up_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status"]) == 1
    assert "not up" in capsys.readouterr().out


def test_every_host_and_dagster_process_writes_results_to_one_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench_defs.capacity.assets import CapacitySearchResource
    from bench_defs.cluster.dagster_procs import dagster_env, worker_env
    from bench_defs.cluster.layout import Layout
    from bench_defs.core.resources import CollobenchResource, WarehouseResource
    from stages import settings

    home = Path(settings.home())  # the test's own (conftest)
    assert settings.results_dir() == home and settings.duckdb_path() == home / "results.duckdb"
    layout = Layout(tmp_path / "cluster")
    env = dagster_env(layout, tmp_path / "pools.yaml")
    assert env[settings.RESULTS_DIR_ENV] == str(tmp_path / "cluster" / "results")
    pool = Pool(name="host-a", queue="host-a", host="host-a", devices=1)
    worker = worker_env(layout, env, pool, "redis://127.0.0.1:1/0")
    assert worker["COLLOBENCH_HOME"] == str(layout.host_home("host-a"))
    assert worker[settings.RESULTS_DIR_ENV] == env[settings.RESULTS_DIR_ENV]
    shared = tmp_path / "shared"
    monkeypatch.setenv(settings.RESULTS_DIR_ENV, str(shared))
    assert layout.results == shared  # a lab's own shared mount is kept
    assert (settings.runs_dir(), settings.capacity_dir(), settings.duckdb_path()) == (
        shared / "runs",
        shared / "capacity",
        shared / "results.duckdb",
    )
    assert settings.artifacts_dir() == home / "artifacts" and settings.locks_dir() == home / "locks"
    assert CollobenchResource().runs_path() == shared / "runs"
    assert CapacitySearchResource().out_path(CollobenchResource()) == shared / "capacity"
    assert WarehouseResource().db_path() == shared / "results.duckdb"

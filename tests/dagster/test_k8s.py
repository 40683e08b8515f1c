"""deploy/k8s/ (never run on a cluster here): every YAML file parses, a benchmark run pod
requests a GPU, storage is Postgres and the runs bucket, the run queue limits runs per device
pool (the pools of deploy/k8s/pools.yaml), run monitoring never resumes a run, and no value is a
password, a key or a loopback address; bench_defs.core.k8s renders the per-run `dagster-k8s/config`
tag (tests/dagster/test_k8s_job.py renders the Job body with dagster-k8s itself)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench_defs.core.k8s import K8S_CONFIG_TAG, gpus_for, k8s_run_config, k8s_run_tags
from bench_defs.core.pools import OLD_DEVICE_TAG, POOL_TAG, Pool, load_pools, pool_limits
from tests.helpers import REPO

DEPLOY = REPO / "deploy" / "k8s"
SECRET_WORDS = re.compile(r"password|passwd|secret|token|credential|api[_-]?key", re.I)
LOOPBACK = re.compile(r"127\.0\.0\.1|localhost|::1\b|0\.0\.0\.0")


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc is not None]


def walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (key path, leaf value) of a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, (*path, str(index)))
    else:
        yield path, node


def secret_literals(node: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Places holding a literal secret: a key named like one with a scalar value (a flag or a
    `...Name` reference to a Secret is fine), or an env entry named like one with a `value`
    (it must use valueFrom.secretKeyRef)."""
    if isinstance(node, dict):
        name = node.get("name")
        if isinstance(name, str) and SECRET_WORDS.search(name) and "value" in node:
            yield ".".join((*path, name))
        for key, value in node.items():
            literal = isinstance(value, str | int | float) and not isinstance(value, bool)
            if SECRET_WORDS.search(str(key)) and literal and not str(key).endswith("Name"):
                yield ".".join((*path, str(key)))
            yield from secret_literals(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from secret_literals(value, (*path, str(index)))


def env_of(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in entries}


def test_every_file_parses_and_nothing_is_secret_or_loopback() -> None:
    files = sorted(path.name for path in DEPLOY.glob("*.yaml"))
    assert files == ["pools.yaml", "postgres.yaml", "runs-bucket.yaml", "values.yaml"]
    for name in files:
        docs = documents(name)
        assert docs, name
        for doc in docs:
            assert doc.get("kind") != "Secret", f"{name}: ships a Secret"
            assert not list(secret_literals(doc)), (name, list(secret_literals(doc)))
            for path, value in walk(doc):
                where = f"{name}: {'.'.join(path)}"
                assert not (isinstance(value, str) and LOOPBACK.search(value)), where


def test_the_secret_scan_finds_literals() -> None:
    env = {"env": [{"name": "PGPASSWORD", "value": "hunter2"}]}
    assert list(secret_literals(env)) == ["env.0.PGPASSWORD"]
    assert list(secret_literals({"postgresql": {"postgresqlPassword": "x"}})) == [
        "postgresql.postgresqlPassword"
    ]
    reference = {"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    assert not list(secret_literals({"env": [reference], "postgresqlSecretName": "s"}))


def test_helm_values_launch_each_run_as_a_gpu_pod_on_postgres() -> None:
    (values,) = documents("values.yaml")
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    config = launcher["config"]["k8sRunLauncher"]
    resources = config["runK8sConfig"]["containerConfig"]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert resources["requests"]["nvidia.com/gpu"] == "1"
    grace = config["runK8sConfig"]["podSpecConfig"]["terminationGracePeriodSeconds"]
    assert grace > 20  # above GroupPipesClient's SIGTERM-to-SIGKILL wait

    # Postgres storage, password from the Secret only
    assert values["postgresql"]["enabled"] is False
    assert "postgresqlPassword" not in values["postgresql"]
    assert values["generatePostgresqlPasswordSecret"] is False
    secret = values["global"]["postgresqlSecretName"]
    service, statefulset = documents("postgres.yaml")
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == values["postgresql"]["postgresqlHost"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    password = env_of(container["env"])["POSTGRES_PASSWORD"]["secretKeyRef"]
    assert password == {"name": secret, "key": "postgresql-password"}
    assert env_of(container["env"])["POSTGRES_USER"] == values["postgresql"]["postgresqlUsername"]

    # run directories on the bucket, mounted where the code location says they are
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = env_of(deployment["env"])
    assert env["COLLOBENCH_K8S"] == "1"
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True
    mounts = {mount["name"]: mount["mountPath"] for mount in config["volumeMounts"]}
    assert mounts["collobench-runs"] == env["COLLOBENCH_RUNS_DIR"]
    assert mounts["collobench-scratch"] == env["COLLOBENCH_HOME"]
    volumes = {volume["name"]: volume for volume in config["volumes"]}
    claim = volumes["collobench-runs"]["persistentVolumeClaim"]["claimName"]
    volume, pvc = documents("runs-bucket.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == claim
    assert pvc["spec"]["volumeName"] == volume["metadata"]["name"]
    assert volume["spec"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert "ReadWriteMany" in volume["spec"]["accessModes"]


def test_runs_queue_per_pool_and_are_never_resumed() -> None:
    (values,) = documents("values.yaml")
    daemon = values["dagsterDaemon"]
    queue = daemon["runCoordinator"]["config"]["queuedRunCoordinator"]
    pools = load_pools(DEPLOY / "pools.yaml")
    assert [pool.name for pool in pools] == ["h100", "a10"]
    # one limit per pool of the pools file the image carries, none per device index
    assert queue["tagConcurrencyLimits"] == pool_limits(pools)
    assert all(limit["key"] == POOL_TAG for limit in queue["tagConcurrencyLimits"])
    assert OLD_DEVICE_TAG not in (DEPLOY / "values.yaml").read_text()
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert env_of(deployment["env"])["COLLOBENCH_POOLS_FILE"] == "/opt/collobench/pools.yaml"
    # a benchmark is never resumed mid-measurement: a dead pod fails its run
    monitoring = daemon["runMonitoring"]
    assert monitoring["enabled"] is True and monitoring["maxResumeRunAttempts"] == 0


def test_run_tag_helper() -> None:
    h100 = Pool(name="h100", queue="h100", host="h100-nodes", devices=8)
    assert k8s_run_tags("cuda:0", h100, environ={}) == {}
    assert k8s_run_tags("cuda:0", h100, environ={"COLLOBENCH_K8S": "0"}) == {}
    tags = k8s_run_tags("cpu+cuda:0+cuda:1", h100, environ={"COLLOBENCH_K8S": "1"})
    assert list(tags) == [K8S_CONFIG_TAG]
    config = json.loads(tags[K8S_CONFIG_TAG])
    assert config == k8s_run_config("cpu+cuda:0+cuda:1", h100)
    resources = config["container_config"]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "2"
    assert resources["limits"] == {"nvidia.com/gpu": "2"}
    assert config["pod_spec_config"]["termination_grace_period_seconds"] == 60
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in config[
        "pod_spec_config"
    ]["tolerations"]
    assert gpus_for("cpu") == 1 and gpus_for("cuda:3") == 1 and gpus_for("cuda:0+cuda:0") == 1
    (term,) = config["pod_spec_config"]["affinity"]["node_affinity"][
        "required_during_scheduling_ignored_during_execution"
    ]["node_selector_terms"]
    assert term["match_expressions"] == [
        {"key": "nvidia.com/gpu.sharing-strategy", "operator": "In", "values": ["none"]},
        {"key": POOL_TAG, "operator": "In", "values": ["h100"]},
    ]
    # the implicit local pool names no nodes: unshared GPUs only
    (local,) = k8s_run_config("cuda:0")["pod_spec_config"]["affinity"]["node_affinity"][
        "required_during_scheduling_ignored_during_execution"
    ]["node_selector_terms"]
    assert [expression["key"] for expression in local["match_expressions"]] == [
        "nvidia.com/gpu.sharing-strategy"
    ]


def test_runs_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bench_defs.core.resources import CollobenchResource

    monkeypatch.setenv("COLLOBENCH_RUNS_DIR", str(tmp_path / "bucket"))
    assert CollobenchResource(home=str(tmp_path / "home")).runs_path() == tmp_path / "bucket"
    explicit = CollobenchResource(runs_dir=str(tmp_path / "x"))
    assert explicit.runs_path() == tmp_path / "x"
    monkeypatch.delenv("COLLOBENCH_RUNS_DIR")
    assert CollobenchResource(home=str(tmp_path)).runs_path() == tmp_path / "runs"

"""The Kubernetes Job body of a benchmark run, rendered by dagster-k8s's own `K8sRunLauncher`
(extra `cluster`) against a mocked Kubernetes API: no cluster runs here (docs/design.md,
"Scale-out: Kubernetes (rendered, not run)"). The run comes from `spec_files_sensor` under
`COLLOBENCH_K8S=1` with deploy/k8s/pools.yaml as the pools file, and the launcher is configured
as deploy/k8s/values.yaml configures it; `create_namespaced_job` captures the body the API
server would get."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import dagster as dg
import pytest
import yaml
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.launcher import LaunchRunContext
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.test_utils import create_run_for_test
from dagster_k8s import K8sRunLauncher
from kubernetes.client import ApiClient

from bench_defs.core.pools import (
    OLD_DEVICE_TAG,
    POOL_TAG,
    POOLS_FILE_ENV,
    load_pools,
    pool_limits,
    write_instance_config,
)
from bench_defs.core.resources import GroupPipesClient
from tests.dagster.specs import tiny_spec, write_spec
from tests.dagster.test_instance_config import run_limits
from tests.dagster.test_sensor import tick
from tests.helpers import REPO

DEPLOY = REPO / "deploy" / "k8s"
IMAGE = "registry.example.com/collobench:0.1.0"
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "paper", "cluster": {"server": "https://k8s.example.invalid"}}],
    "users": [{"name": "paper", "user": {}}],
    "contexts": [{"name": "paper", "context": {"cluster": "paper", "user": "paper"}}],
    "current-context": "paper",
}


@pytest.fixture
def on_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code location's environment in deploy/k8s/values.yaml: the K8s tag on, the pools."""
    monkeypatch.setenv("COLLOBENCH_K8S", "1")
    monkeypatch.setenv(POOLS_FILE_ENV, str(DEPLOY / "pools.yaml"))


def launcher_config() -> dict[str, Any]:
    (values,) = [doc for doc in yaml.safe_load_all((DEPLOY / "values.yaml").read_text()) if doc]
    return values["runLauncher"]["config"]["k8sRunLauncher"]


def render(tags: dict[str, str], tmp_path: Path, instance: dg.DagsterInstance) -> dict[str, Any]:
    """The Job body K8sRunLauncher.launch_run sends for a benchmark_job run with `tags`, as
    JSON (camelCase, what the API server receives)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    config = launcher_config()
    run_k8s = config["runK8sConfig"]
    batch_api = mock.MagicMock()
    launcher = K8sRunLauncher(
        service_account_name="dagster",
        instance_config_map="dagster-instance",
        postgres_password_secret="dagster-postgresql-secret",
        dagster_home="/opt/dagster/dagster_home",
        load_incluster_config=False,
        kubeconfig_file=str(kubeconfig),
        k8s_client_batch_api=batch_api,
        k8s_client_core_api=mock.MagicMock(),
        fail_pod_on_run_failure=config["failPodOnRunFailure"],
        volumes=config["volumes"],
        volume_mounts=config["volumeMounts"],
        run_k8s_config={
            "container_config": run_k8s["containerConfig"],
            "pod_spec_config": run_k8s["podSpecConfig"],
            "pod_template_spec_metadata": run_k8s["podTemplateSpecMetadata"],
        },
    )
    origin = JobPythonOrigin(
        "benchmark_job",
        RepositoryPythonOrigin(
            executable_path=sys.executable,
            code_pointer=ModuleCodePointer("bench_defs.definitions", "defs", None),
            container_image=IMAGE,
        ),
    )
    run = create_run_for_test(instance, job_name="benchmark_job", tags=tags, job_code_origin=origin)
    launcher.register_instance(instance)
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    created = [call for call in batch_api.method_calls if call[0] == "create_namespaced_job"]
    assert len(created) == 1, batch_api.method_calls
    return ApiClient().sanitize_for_serialization(created[0].kwargs["body"])


def sensor_run_tags(
    instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any], specs: Path
) -> dict[str, str]:
    """The tags `spec_files_sensor` gives a new two-GPU spec."""
    first = tick(instance, defs, resources, None)
    spec = tiny_spec("two_gpus")
    spec["pipelines"][0]["device"] = "cuda:0"
    spec["pipelines"].append(
        copy.deepcopy(spec["pipelines"][0]) | {"name": "q", "device": "cuda:1"}
    )
    write_spec(specs, "two_gpus", spec)
    (request,) = tick(instance, defs, resources, first.cursor).run_requests or []
    return dict(request.tags)


@pytest.mark.usefixtures("on_kubernetes")
def test_the_job_body_of_a_benchmark_run(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    specs_dir: Path,
) -> None:
    tags = sensor_run_tags(instance, defs, resources, specs_dir)
    assert tags[POOL_TAG] == "h100" and OLD_DEVICE_TAG not in tags
    job = render(tags, tmp_path, instance)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    # whole GPUs: requests = limits = the spec's two CUDA devices
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    # only unshared GPUs (no time-slicing, no MPS), only the pool's nodes
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = required["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.sharing-strategy", "operator": "In", "values": ["none"]} in (
        term["matchExpressions"]
    )
    assert {"key": POOL_TAG, "operator": "In", "values": ["h100"]} in term["matchExpressions"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    # a cancelled run ends its benchmark's process group before the kubelet's SIGKILL
    assert pod["terminationGracePeriodSeconds"] > GroupPipesClient().termination_grace_s
    # the run directories' bucket is mounted where the code location writes them
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts["collobench-runs"] == "/mnt/collobench-runs"
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == (
        "collobench"
    )


@pytest.mark.usefixtures("on_kubernetes")
def test_runs_are_limited_per_pool_not_per_device_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools = load_pools()
    write_instance_config(tmp_path, pools)
    limits = run_limits(tmp_path, monkeypatch)
    assert (
        limits
        == pool_limits(pools)
        == [
            {"key": POOL_TAG, "value": "h100", "limit": 8},
            {"key": POOL_TAG, "value": "a10", "limit": 4},
        ]
    )
    assert not [limit for limit in limits if isinstance(limit.get("value"), dict)]
    assert OLD_DEVICE_TAG not in (tmp_path / "dagster.yaml").read_text()

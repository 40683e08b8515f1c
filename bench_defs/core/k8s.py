"""Scale-out on Kubernetes (deploy/k8s/): the per-run pod configuration of a benchmark run.

Under dagster-k8s's `K8sRunLauncher` every Dagster run is its own Kubernetes Job and pod; the
launcher reads the run tag `dagster-k8s/config` (per-step pods would read op tags instead:
benchmark_job runs its steps in the run's pod). With `$COLLOBENCH_K8S=1` (set on the code
location in deploy/k8s/values.yaml) every benchmark run carries that tag: one pod per benchmark,
`nvidia.com/gpu` requested and limited to the GPUs its spec uses (at least one, so a CPU-only
spec still gets a GPU node to itself and no co-tenant benchmark), a required node affinity on
`nvidia.com/gpu.sharing-strategy In [none]` (GPU Feature Discovery's label: a time-sliced or
MPS-shared GPU is not exclusive, whatever the device plugin counts) and, for a pool of the pools
file, on the node label `collobench/gpu-pool In [<pool>]` (label the pool's nodes so), a
toleration for GPU node taints, and a termination grace longer than the Pipes client's
SIGTERM-to-SIGKILL wait, so a cancelled run winds its workers down before the kubelet kills the
pod. The instance's run limit per pool (bench_defs/core/pools.py) keeps runs in Dagster's queue
rather than as Pending pods; there is no per-`cuda:N` limit (a pod never picks its GPU index).

Nothing here imports dagster-k8s (an extra, `cluster`): the tag is plain JSON, which the
launcher parses when it builds the Job (tests/dagster/test_k8s_job.py renders it with the real
launcher).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from bench_defs.core.pools import LOCAL_POOL, POOL_TAG, Pool

K8S_ENV = "COLLOBENCH_K8S"
"""`1`: benchmark runs carry the `dagster-k8s/config` tag (one GPU pod per run)."""
K8S_CONFIG_TAG = "dagster-k8s/config"
GPU_RESOURCE = "nvidia.com/gpu"
TERMINATION_GRACE_S = 60
"""Pod termination grace: above `GroupPipesClient.termination_grace_s` (20 s) plus the run
worker's own shutdown, so cancellation ends the benchmark's process group first."""
CPU_REQUEST = "4"
MEMORY_REQUEST = "16Gi"
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
"""GPU Feature Discovery's node label: `none`, `time-slicing` or `mps`."""
POOL_NODE_LABEL = POOL_TAG
"""The node label naming a node's pool (same key as the run tag)."""


def k8s_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `$COLLOBENCH_K8S` asks for the per-run pod tag."""
    value = (environ if environ is not None else os.environ).get(K8S_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def gpus_for(devices: str) -> int:
    """GPUs a benchmark's pod requests: the distinct CUDA devices of its device tag (`cpu`,
    `cuda:0`, `cpu+cuda:0+cuda:1`), at least one."""
    cuda = {part for part in devices.split("+") if part.startswith("cuda")}
    return max(1, len(cuda))


def node_affinity(pool: Pool | None) -> dict[str, Any]:
    """Required node affinity: unshared GPUs, and the pool's nodes (not for the implicit local
    pool, which names no nodes)."""
    expressions = [{"key": SHARING_LABEL, "operator": "In", "values": ["none"]}]
    if pool is not None and pool != LOCAL_POOL:
        expressions.append({"key": POOL_NODE_LABEL, "operator": "In", "values": [pool.name]})
    return {
        "node_affinity": {
            "required_during_scheduling_ignored_during_execution": {
                "node_selector_terms": [{"match_expressions": expressions}]
            }
        }
    }


def k8s_run_config(devices: str, pool: Pool | None = None) -> dict[str, Any]:
    """The `dagster-k8s/config` value of a benchmark run using `devices` in `pool`."""
    gpus = str(gpus_for(devices))
    return {
        "container_config": {
            "resources": {
                "requests": {"cpu": CPU_REQUEST, "memory": MEMORY_REQUEST, GPU_RESOURCE: gpus},
                "limits": {GPU_RESOURCE: gpus},
            }
        },
        "pod_spec_config": {
            "termination_grace_period_seconds": TERMINATION_GRACE_S,
            "affinity": node_affinity(pool),
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        },
        "pod_template_spec_metadata": {"labels": {"app.kubernetes.io/part-of": "collobench"}},
    }


def k8s_run_tags(
    devices: str, pool: Pool | None = None, *, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`{dagster-k8s/config: <JSON>}` when `$COLLOBENCH_K8S` is on, else `{}` (run tags are
    strings; the launcher parses the JSON)."""
    if not k8s_enabled(environ):
        return {}
    return {K8S_CONFIG_TAG: json.dumps(k8s_run_config(devices, pool), sort_keys=True)}

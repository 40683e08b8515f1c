"""Scale-out on Kubernetes (deploy/k8s/): the per-run pod configuration of a benchmark run.

Under dagster-k8s's `K8sRunLauncher` every Dagster run is its own Kubernetes Job and pod; the
launcher reads the run tag `dagster-k8s/config` (per-step pods would read op tags instead:
benchmark_job runs its steps in the run's pod). With `$COLLOBENCH_K8S=1` (set on the code
location in deploy/k8s/values.yaml) every benchmark run carries that tag: one pod per benchmark,
`nvidia.com/gpu` requested and limited to the GPUs its spec uses (at least one, so a CPU-only
spec still gets a GPU node to itself and no co-tenant benchmark), a toleration for GPU node
taints, and a termination grace longer than the Pipes client's SIGTERM-to-SIGKILL wait, so a
cancelled run winds its workers down before the kubelet kills the pod.

Nothing here imports dagster-k8s (it is not a dependency): the tag is plain JSON, which the
launcher parses when it builds the Job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

K8S_ENV = "COLLOBENCH_K8S"
"""`1`: benchmark runs carry the `dagster-k8s/config` tag (one GPU pod per run)."""
K8S_CONFIG_TAG = "dagster-k8s/config"
GPU_RESOURCE = "nvidia.com/gpu"
TERMINATION_GRACE_S = 60
"""Pod termination grace: above `GroupPipesClient.termination_grace_s` (20 s) plus the run
worker's own shutdown, so cancellation ends the benchmark's process group first."""
CPU_REQUEST = "4"
MEMORY_REQUEST = "16Gi"


def k8s_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `$COLLOBENCH_K8S` asks for the per-run pod tag."""
    value = (environ if environ is not None else os.environ).get(K8S_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def gpus_for(devices: str) -> int:
    """GPUs a benchmark's pod requests: the distinct CUDA devices of its device tag (`cpu`,
    `cuda:0`, `cpu+cuda:0+cuda:1`), at least one."""
    cuda = {part for part in devices.split("+") if part.startswith("cuda")}
    return max(1, len(cuda))


def k8s_run_config(devices: str) -> dict[str, Any]:
    """The `dagster-k8s/config` value of a benchmark run using `devices`."""
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
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        },
        "pod_template_spec_metadata": {"labels": {"app.kubernetes.io/part-of": "collobench"}},
    }


def k8s_run_tags(devices: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`{dagster-k8s/config: <JSON>}` when `$COLLOBENCH_K8S` is on, else `{}` (run tags are
    strings; the launcher parses the JSON)."""
    if not k8s_enabled(environ):
        return {}
    return {K8S_CONFIG_TAG: json.dumps(k8s_run_config(devices), sort_keys=True)}

"""Placement and collocation-mode checks (the GPU modes cannot run here; their set-up can)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.collocation.placement import (
    PlacementError,
    apply_cpu_affinity,
    check_collocation,
    torch_device,
    worker_environment,
)
from stages.spec.models import BenchmarkSpec, PipelineSpec
from tests.helpers import REPO


def pipeline(**fields: object) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {"name": "p", "stages": [{"id": "s", "type": "noop"}], **fields}
    )


def bench(mode: str, *pipelines: PipelineSpec) -> BenchmarkSpec:
    return BenchmarkSpec(
        name="b",
        collocation={"mode": mode},
        pipelines=list(pipelines),
    )


def test_cuda_index_uuid_mps_and_mig_environments() -> None:
    assert worker_environment(pipeline(device="cuda:1"), "time_slice") == {
        "CUDA_VISIBLE_DEVICES": "1"
    }
    uuid = "GPU-5c1a0f2e-aaaa-bbbb-cccc-000000000000"
    assert (
        worker_environment(pipeline(device="cuda", placement={"gpu": uuid}), "time_slice")[
            "CUDA_VISIBLE_DEVICES"
        ]
        == uuid
    )
    mps = worker_environment(
        pipeline(device="cuda", placement={"gpu": 0, "mps_thread_percentage": 30}), "mps"
    )
    assert mps == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"}
    mig = "MIG-2f1e3c4d-1111-2222-3333-444444444444"
    assert worker_environment(pipeline(device="cuda", placement={"mig": mig}), "mig") == {
        "CUDA_VISIBLE_DEVICES": mig
    }
    assert torch_device(pipeline(device="cuda:1"), "time_slice") == "cuda:0"
    assert worker_environment(pipeline(placement={"threads": 2}), "time_slice") == {
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    assert worker_environment(pipeline(), "cpu_pinned") == {}


def test_mps_needs_a_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    spec = bench("mps", pipeline(device="cuda"))
    problems = check_collocation(spec, gpu_count=1)
    assert len(problems) == 1 and "nvidia-cuda-mps-control -d" in problems[0]
    (tmp_path / "control").touch()
    assert check_collocation(spec, gpu_count=1) == []


def test_mig_needs_instance_uuids() -> None:
    spec = bench("mig", pipeline(device="cuda", placement={"mig": "0"}))
    assert "MIG instance UUID" in check_collocation(spec, gpu_count=1)[0]
    good = bench("mig", pipeline(device="cuda", placement={"mig": "MIG-abc"}))
    assert check_collocation(good, gpu_count=1) == []


def test_cuda_without_gpu_is_refused() -> None:
    problems = check_collocation(bench("time_slice", pipeline(device="cuda")), gpu_count=None)
    assert problems and "no NVIDIA GPU is visible" in problems[0]


def test_cpu_affinity_is_applied_and_checked() -> None:
    before = os.sched_getaffinity(0)
    try:
        apply_cpu_affinity([min(before)])
        assert os.sched_getaffinity(0) == {min(before)}
    finally:
        os.sched_setaffinity(0, before)
    with pytest.raises(PlacementError, match=r"cpus \[4096\] are not available"):
        apply_cpu_affinity([4096])


def test_a_resident_worker_can_move_to_other_cores_and_back() -> None:
    """An A/B duet's worker runs on one half of the cores in one block and on the other in
    the next: the cores it started with stay available, and no placement restores them."""
    before = os.sched_getaffinity(0)
    first, last = min(before), max(before)
    try:
        apply_cpu_affinity([first])
        apply_cpu_affinity([last])
        assert os.sched_getaffinity(0) == {last}
        apply_cpu_affinity(None)
        assert os.sched_getaffinity(0) == before
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.spawns
def test_the_worker_places_itself_with_the_policy_before_its_threads() -> None:
    """In a process of its own (the policy stays with the process): the worker's placement
    step gives it its cores and SCHED_BATCH, and a thread started afterwards inherits both;
    `other` touches nothing."""
    script = (
        "import os, threading\n"
        "from stages.collocation.placement import apply_scheduling_policy\n"
        "from stages.collocation.worker import WorkerTask, _placed_pipeline\n"
        "apply_scheduling_policy('other')\n"
        "before = os.sched_getscheduler(0)\n"
        "pipeline = {'name': 'p', 'stages': [{'id': 's', 'type': 'noop'}],\n"
        "            'placement': {'cpus': [0], 'scheduling_policy': 'batch'}}\n"
        "_placed_pipeline(WorkerTask(run_dir='.', run_id='r', trial=0, phase='solo',\n"
        "                            pipeline=pipeline, spec_seed=0,\n"
        "                            collocation_mode='cpu_pinned', cache_dir='.'))\n"
        "seen = []\n"
        "def look(): seen.extend([os.sched_getscheduler(0), *os.sched_getaffinity(0)])\n"
        "thread = threading.Thread(target=look)\n"
        "thread.start(); thread.join()\n"
        "print(before, os.sched_getscheduler(0), *seen)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert [int(value) for value in out] == [os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_BATCH, 0]

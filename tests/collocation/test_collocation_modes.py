"""The collocation modes are one registry: the spec accepts exactly its names (in its order),
no module outside the modes branches on a mode's name, and a pipeline's worker and a started
service get their CUDA environment from the one placement rule (stages.contracts)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from stages.collocation.placement import torch_device, worker_environment
from stages.collocation_modes import (
    COLLOCATION_MODE_NAMES,
    COLLOCATION_MODES,
    MODE_CLASSES,
    CollocationMode,
)
from stages.contracts.placement_environment import (
    CUDA_VISIBLE_DEVICES,
    MPS_ACTIVE_THREAD_PERCENTAGE,
    placement_environment,
)
from stages.services.registry import default_service_registry
from stages.spec.models import CollocationSpec, PipelineSpec
from stages.spec.services import ServiceSpec
from stages.validation.schema import spec_json_schema
from tests.helpers import REPO


def test_the_spec_accepts_exactly_the_registered_modes_in_their_order() -> None:
    accepted = typing.get_args(CollocationSpec.model_fields["mode"].annotation)
    assert accepted == COLLOCATION_MODE_NAMES == ("time_slice", "mps", "mig", "cpu_pinned")
    assert COLLOCATION_MODES.names() == sorted(COLLOCATION_MODE_NAMES)
    schema = spec_json_schema()["$defs"]["CollocationSpec"]["properties"]["mode"]
    assert schema["enum"] == list(COLLOCATION_MODE_NAMES)
    assert CollocationSpec().mode == COLLOCATION_MODE_NAMES[0]


@pytest.mark.parametrize("mode_class", MODE_CLASSES, ids=lambda mode: mode.name)
def test_each_mode_has_a_name_and_a_one_line_doc(mode_class: type[CollocationMode]) -> None:
    assert mode_class.name and mode_class.doc and "\n" not in mode_class.doc
    assert COLLOCATION_MODES.get(mode_class.name).__class__ is mode_class


def _python_modules(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (REPO / package).rglob("*.py"))


def test_no_module_outside_the_modes_branches_on_a_mode_name() -> None:
    """`mode == "mps"`, `mode in ("mps", "mig")`: such a branch belongs in the mode's class."""
    names = set(COLLOCATION_MODE_NAMES)
    found = []
    for path in _python_modules("stages", "bench_defs"):
        if "collocation_modes" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            for operand in [node.left, *node.comparators]:
                elements = operand.elts if isinstance(operand, ast.Tuple | ast.Set) else [operand]
                constants = {e.value for e in elements if isinstance(e, ast.Constant)}
                if constants & names:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_only_the_placement_contract_sets_the_cuda_variables() -> None:
    """`environment["CUDA_VISIBLE_DEVICES"] = ...` is written in one place."""
    variables = {CUDA_VISIBLE_DEVICES, MPS_ACTIVE_THREAD_PERCENTAGE}
    found = []
    for path in _python_modules("stages"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    key = target.slice if isinstance(target, ast.Subscript) else None
                    if isinstance(key, ast.Constant) and key.value in variables:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []  # the contract writes them through its constants


@pytest.mark.parametrize(
    ("device", "gpu"), [("cuda:1", None), ("cuda", 2), ("cuda", "GPU-5c1a"), ("cpu", None)]
)
def test_a_worker_and_a_service_get_the_same_placement_environment(
    device: str, gpu: int | str | None
) -> None:
    placement = {"gpu": gpu, "mps_thread_percentage": 40}
    pipeline = PipelineSpec.model_validate(
        {
            "name": "p",
            "device": device,
            "placement": placement,
            "stages": [{"id": "s", "type": "noop"}],
        }
    )
    service = ServiceSpec.model_validate(
        {"name": "svc", "type": "vllm.serve", "device": device, "placement": placement}
    )
    vllm = default_service_registry().get("vllm.serve")
    expected = placement_environment(device, gpu=gpu, mps_thread_percentage=40)
    assert worker_environment(pipeline, "mps") == expected
    assert vllm.environment(service, {}) == expected
    assert torch_device(pipeline, "mps") == vllm.device(service)

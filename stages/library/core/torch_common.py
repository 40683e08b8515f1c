"""What every model stage shares: a config base (dtype, threads, compile, profiling) and the
device synchronisation that makes a stage's finish time mean "the work is done".

No torch import at module level: specs are validated without paying for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from stages.runtime.stage import StageConfig


class ModelStageConfig(StageConfig):
    """Options of every stage that runs a torch model."""

    dtype: Literal["float32", "float16", "bfloat16"] = Field(
        "float32", description="Parameter and input dtype (float16 is for CUDA)."
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads of this worker process (torch.set_num_threads); "
        "default: the pipeline's placement.threads, else torch's own default.",
    )
    compile: bool = Field(
        False, description="Wrap the model in torch.compile (compiled in prepare, never timed)."
    )
    profile_every: int = Field(
        0,
        ge=0,
        description="Run torch.profiler on every Nth query of this stage and record its operator "
        "spans in operator_spans.parquet; 0 = off (the default: profiling costs time).",
    )


def device_synchronizer(device: str, torch_module: Any = None) -> Callable[[], None]:
    """The call that waits until `device` has finished its queued work.

    CUDA kernels run asynchronously: without this, a stage's `finished_ns` would be taken when
    the kernels were queued, not when they ran, and latencies would be meaningless. On CPU
    there is nothing to wait for.
    """
    if not device.startswith("cuda"):
        return _nothing
    if torch_module is None:
        import torch as torch_module
    target = torch_module.device(device)
    synchronize = torch_module.cuda.synchronize

    def wait_for_device() -> None:
        synchronize(target)

    return wait_for_device


def _nothing() -> None:
    return None

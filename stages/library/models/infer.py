"""`model.infer`: any model file a user brings (ONNX, `torch.export`, TorchScript) run on the
payload's tensors, so a model outside the vision and text families benchmarks without code.

The spec declares the model's `inputs` (name, shape with the batch first, dtype) and the form
of its `outputs` (`argmax`, `topk`, `raw`). Prepare checks the declared inputs against what
the file declares (an ONNX graph's inputs, a `torch.export` program's), builds seeded
synthetic inputs from the declaration (for a pipeline without a dataset) and makes one
warm-up call before the barrier. torch and onnxruntime are imported in `prepare`, never at
import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from stages.library.core.profiling import OperatorProfiler
from stages.library.core.torch_common import ModelStageConfig, device_synchronizer
from stages.library.models import loaders
from stages.library.models.common import DeclaredInput, ModelFileError, model_file_reason
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageContext
from stages.spec.base import StrictModel
from stages.spec.model_entry import ModelEntry

INFER_FORMATS = frozenset({"onnx", "torch_export", "torchscript"})
"""Model entry formats `model.infer` runs."""
InputDtype = Literal[
    "float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"
]
SYNTHETIC_INT_HIGH = 16
"""Synthetic integer inputs are drawn from [0, SYNTHETIC_INT_HIGH) (token ids, indices)."""
Named = list[tuple[str, Any]]
"""A model call's outputs: (name, tensor) in the model's order."""


class InputSpec(StrictModel):
    """One input the model takes, as the spec declares it."""

    name: str = Field(
        ...,
        min_length=1,
        description="The input's name: an ONNX graph input's name, and the payload key "
        "holding it (torch models take the inputs in the order declared).",
    )
    shape: list[Annotated[int, Field(ge=1)]] = Field(
        ...,
        min_length=1,
        description="The input's shape, the batch size first: the size of the synthetic "
        "inputs, and checked against the file's fixed dimensions.",
    )
    dtype: InputDtype = Field(
        "float32",
        description="The input's element type (float32, float16, float64, int64, int32, "
        "int16, int8, uint8, bool); a payload's tensor is converted to it.",
    )


class InferConfig(ModelStageConfig):
    """Options of `model.infer`: the model file, its declared inputs and the output form."""

    model_entry_fields: ClassVar[tuple[str, ...]] = ("model",)
    model: ModelEntry = Field(
        ...,
        description="The model file: a model entry of format `onnx`, `torch_export` or "
        "`torchscript` (stages.spec.model_entry).",
    )
    inputs: list[InputSpec] = Field(
        ...,
        min_length=1,
        description="The model's inputs (name, shape, dtype), in the order a torch model "
        "takes them.",
    )
    outputs: Literal["argmax", "topk", "raw"] = Field(
        "argmax",
        description="What the stage returns of the model's (first) output: argmax over the "
        "last dimension, the `k` largest values and their indices, or the output(s) as they "
        "come.",
    )
    k: int | None = Field(None, ge=1, description="How many values `outputs: topk` keeps.")

    @field_validator("model")
    @classmethod
    def _runnable(cls, value: ModelEntry) -> ModelEntry:
        if value.format not in INFER_FORMATS:
            formats = ", ".join(sorted(INFER_FORMATS))
            raise ValueError(f"model.infer runs {formats} entries, not {value.format}")
        if value.labels is not None:
            raise ValueError("model.infer reports the model's own output indices: drop `labels`")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> InferConfig:
        names = [spec.name for spec in self.inputs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"input names must differ: {', '.join(repeated)} repeated")
        if (self.outputs == "topk") != (self.k is not None):
            raise ValueError("`outputs: topk` needs `k`, and `k` goes with `outputs: topk`")
        if self.model.format == "onnx" and (self.dtype != "float32" or self.compile):
            raise ValueError("an ONNX model runs as exported: float32, without `compile`")
        return self


# --------------------------------------------------------------------------- checks


def check_declared(
    config: InferConfig, found: Sequence[DeclaredInput] | None, by_name: bool
) -> None:
    """Raise ModelFileError (one line) when the declared inputs do not fit what the file
    declares (None: it declares nothing to check against). ONNX inputs are matched by name, a
    torch program's by position."""
    if found is None:
        return
    where = config.model.location
    declared = config.inputs
    if by_name:
        theirs = {name: (name, shape, dtype) for name, shape, dtype in found}
        missing = [spec.name for spec in declared if spec.name not in theirs]
        extra = sorted(set(theirs) - {spec.name for spec in declared})
        if missing or extra:
            raise ModelFileError(
                f"{where}: declared inputs {[s.name for s in declared]} but the file's are "
                f"{list(theirs)}"
            )
        pairs = [(spec, theirs[spec.name]) for spec in declared]
    else:
        if len(found) != len(declared):
            raise ModelFileError(
                f"{where}: {len(declared)} inputs declared but the file takes {len(found)}"
            )
        pairs = list(zip(declared, found, strict=True))
    for spec, (_, shape, dtype) in pairs:
        problem = _mismatch(spec, shape, dtype)
        if problem:
            raise ModelFileError(f"{where}: input '{spec.name}' {problem}")


def _mismatch(spec: InputSpec, shape: tuple[int | None, ...], dtype: str) -> str | None:
    """Why a declared input does not fit the file's (None when it fits)."""
    shown = "[" + ", ".join("?" if size is None else str(size) for size in shape) + "]"
    if len(shape) != len(spec.shape):
        return f"has rank {len(shape)} in the file ({shown}), declared {spec.shape}"
    for index, (size, wanted) in enumerate(zip(shape, spec.shape, strict=True)):
        if size is not None and size != wanted:
            return f"dimension {index} is {size} in the file ({shown}), declared {wanted}"
    if dtype != spec.dtype:
        return f"is {dtype} in the file, declared {spec.dtype}"
    return None


# --------------------------------------------------------------------------- running


def synthetic_inputs(inputs: list[InputSpec], seed: int, device: Any) -> list[Any]:
    """One tensor per declared input, seeded: normal floats, small non-negative ints, random
    booleans."""
    import torch

    generator = torch.Generator().manual_seed(seed % 2**63)  # a stage seed may pass 64 bits
    made = []
    for spec in inputs:
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            tensor = torch.randn(spec.shape, generator=generator).to(dtype)
        else:
            high = 2 if dtype == torch.bool else SYNTHETIC_INT_HIGH
            tensor = torch.randint(0, high, spec.shape, generator=generator).to(dtype)
        made.append(tensor.to(device))
    return made


def onnx_runner(model: Any, names: list[str]) -> Callable[[list[Any]], Named]:
    """A call of an ONNX session on tensors in the declared order, fed by name."""
    import torch

    def run(tensors: list[Any]) -> Named:
        feed = {name: t.detach().to("cpu").numpy() for name, t in zip(names, tensors, strict=True)}
        arrays = model.run_named(feed)
        return [(n, torch.from_numpy(a)) for n, a in zip(model.output_names, arrays, strict=True)]

    return run


def torch_runner(module: Any) -> Callable[[list[Any]], Named]:
    """A call of a torch module on tensors in the declared order; its output(s) named: a
    tensor as `output`, a sequence's as `output0`, `output1`..., a dict's by key."""

    def run(tensors: list[Any]) -> Named:
        result = module(*tensors)
        if isinstance(result, dict):
            return list(result.items())
        if isinstance(result, list | tuple):
            return [(f"output{index}", value) for index, value in enumerate(result)]
        return [("output", result)]

    return run


class InferStage(Stage[InferConfig]):
    """ONE QUERY = one call of the model file on the payload's declared inputs (or, when the
    payload holds none of them, on the seeded synthetic inputs), under
    `torch.inference_mode()`. Payload out: the payload's fields plus `outputs` (argmax: int64
    [B]; topk: {"values", "indices"}; raw: the tensor, or name -> tensor for several). With
    `outputs: argmax` and `labels` in the payload, the batch is graded as by
    `torchvision.classify`."""

    records_outcome = True

    def __init__(self, config: InferConfig, context: StageContext) -> None:
        super().__init__(config, context)
        self.profiler = OperatorProfiler(config.profile_every, context)

    def prepare(self) -> None:
        import torch

        config = self.config
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self._torch = torch
        self._device = torch.device(self.context.device)
        if config.model.format == "onnx":
            model = loaders.load_onnx_model(config.model, self.context.device, config.threads)
            self._input_device = torch.device("cpu")
            self._call = onnx_runner(model, [spec.name for spec in config.inputs])
        else:
            model = loaders.load_torch_model(config.model)
            model = model.to(self._device, getattr(torch, config.dtype))
            self._input_device = self._device
            self._call = torch_runner(torch.compile(model) if config.compile else model)
        by_name = config.model.format == "onnx"
        check_declared(config, loaders.declared_inputs(model), by_name)
        self._synthetic = synthetic_inputs(config.inputs, self.context.seed, self._input_device)
        self._synchronize = device_synchronizer(self.context.device)
        self._warm_up()

    def _warm_up(self) -> None:
        """One call on the synthetic inputs before the barrier (compilation and lazy first-call
        set-up never land in a timed query); a model that fails it, or whose output `topk`
        cannot take `k` of, fails prepare on one line."""
        where = self.config.model.location
        try:
            with self._torch.inference_mode():
                named = self._call(self._synthetic)
        except Exception as error:  # a rank, dtype or operator the file does not take
            raise ModelFileError(
                f"{where}: the call on the declared inputs failed: {model_file_reason(error)}"
            ) from error
        first = named[0][1]
        k = self.config.k
        if k is not None and (first.ndim == 0 or first.shape[-1] < k):
            raise ModelFileError(
                f"{where}: `k` is {k} but the output's last dimension is "
                f"{first.shape[-1] if first.ndim else 'absent'}"
            )
        self._synchronize()

    def _inputs(self, payload: Any) -> list[Any]:
        """The declared inputs: the payload's (converted to the declared dtype, on the device
        the model reads from), or the synthetic ones when the payload holds none of them."""
        names = [spec.name for spec in self.config.inputs]
        held = [name for name in names if isinstance(payload, dict) and name in payload]
        if not held:
            return self._synthetic
        if len(held) < len(names):
            missing = ", ".join(name for name in names if name not in held)
            raise ValueError(f"the payload holds some declared inputs but not {missing}")
        torch = self._torch
        return [
            torch.as_tensor(payload[spec.name]).to(
                self._input_device, getattr(torch, spec.dtype), non_blocking=True
            )
            for spec in self.config.inputs
        ]

    def _shaped(self, named: Named) -> Any:
        """The `outputs` entry of the payload, in the configured form."""
        first = named[0][1]
        if self.config.outputs == "argmax":
            return first.argmax(-1)
        if self.config.outputs == "topk":
            values, indices = first.topk(self.config.k, dim=-1)
            return {"values": values, "indices": indices}
        return first if len(named) == 1 else dict(named)

    def run(self, query: Query) -> Route:
        payload = query.payload
        labels = payload.get("labels") if isinstance(payload, dict) else None
        with self._torch.inference_mode():
            inputs = self._inputs(payload)
            with self.profiler.around(query):
                named = self._call(inputs)
            outputs = self._shaped(named)
            if labels is not None and self.config.outputs == "argmax":
                query.graded = int(labels.shape[0])
                truth = self._torch.as_tensor(labels).to(outputs.device)
                query.correct = int((outputs == truth).sum())
        self._synchronize()  # finished_ns must come after the device has finished
        fields = payload if isinstance(payload, dict) else {}
        query.payload = {**fields, "outputs": outputs}
        return None

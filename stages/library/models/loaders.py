"""A model file a user brings (`stages.spec.model_entry`), loaded as a torch module: the
weights of a torchvision architecture (safetensors, or a state dict read with `weights_only`),
a TorchScript module, a `torch.export` program or a Hugging Face image classifier folder
(`stages.library.models.hf_folders`; one loader per format, in a registry); or an ONNX file as
an ONNX Runtime session behind the same call (`OnnxModel`, which also feeds several inputs by
name);
and the inputs each file declares, to check a spec against.

Nothing here unpickles arbitrary objects: a state dict is read with `weights_only=True`, so a
`.pt` file holding a pickled full model is refused with the reason, before any of its code
could run. A file that does not load fails the stage's prepare (outside every load window)
with one line: the file, the format and the loader's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stages.library.models.common import (
    INPUT_SHAPE_ATTRIBUTE,
    DeclaredInput,
    ModelFileError,
    located,
    model_file_reason,
)
from stages.spec.model_entry import ModelEntry, ModelFormat, onnx_execution_provider

INPUTS_ATTRIBUTE = "collobench_inputs"
"""Set on a loaded `torch.export` module: its user inputs (`DeclaredInput`s, in call order)."""
ONNX_ELEMENT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
"""ONNX Runtime's element type -> the dtype name torch and numpy use."""


def load_torch_model(entry: ModelEntry) -> Any:
    """The module `entry` names, on the CPU in float32 (the stage moves it)."""
    entry = located(entry)
    loader = TORCH_LOADERS.get(entry.format)
    if loader is None:
        raise ModelFileError(f"{entry.location}: a {entry.format} model does not load into torch")
    try:
        return loader(entry)
    except ModelFileError:
        raise
    except Exception as error:  # a corrupt file, an unsupported operator, a wrong format
        raise ModelFileError(
            f"{entry.location}: cannot load as {entry.format}: {model_file_reason(error)}"
        ) from error


def _state_dict(path: Path) -> dict[str, Any]:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        if "weights_only" in str(error) or "Unsupported global" in str(error):
            raise ModelFileError(
                f"{path}: holds pickled objects, not only tensors (a full model saved with "
                "torch.save(model)?): save model.state_dict(), or use safetensors"
            ) from None
        raise
    if not isinstance(state, dict):
        raise ModelFileError(f"{path}: not a state dict (a mapping of names to tensors)")
    return state


def _torchvision_weights(entry: ModelEntry) -> Any:
    import torchvision

    assert entry.arch is not None  # the entry's validator pairs `weights` with `arch`
    state = _state_dict(Path(entry.location))
    # The file's class count: the width of the architecture's last layer with the default
    # 1000 outputs, as the file has it (a safetensors file orders its keys by name).
    default = torchvision.models.get_model(entry.arch, weights=None).state_dict()
    heads = [key for key, value in default.items() if value.ndim and value.shape[0] == 1000]
    num_classes = int(state[heads[-1]].shape[0]) if heads and heads[-1] in state else 1000
    model = torchvision.models.get_model(entry.arch, weights=None, num_classes=num_classes)
    model.load_state_dict(state)
    return model.eval()


def _torchscript(entry: ModelEntry) -> Any:
    import torch

    module = torch.jit.load(entry.location, map_location="cpu")  # type: ignore[no-untyped-call]
    return module.eval()


def _torch_export(entry: ModelEntry) -> Any:
    import torch

    program = torch.export.load(entry.location)
    module = program.module()
    # The shape it was exported with: what `input_shape` reports.
    example = program.example_inputs[0] if program.example_inputs else ()
    setattr(module, INPUT_SHAPE_ATTRIBUTE, tuple(example[0].shape) if example else None)
    setattr(module, INPUTS_ATTRIBUTE, _exported_inputs(program))
    return module


def _exported_inputs(program: Any) -> list[DeclaredInput]:
    """The user inputs of a `torch.export` program, from its graph's placeholders: a dynamic
    dimension (a symbol) as None."""
    import torch

    user = set(program.graph_signature.user_inputs)
    found: list[DeclaredInput] = []
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and node.name in user and isinstance(value, torch.Tensor):
            shape = tuple(size if isinstance(size, int) else None for size in value.shape)
            found.append((node.name, shape, str(value.dtype).removeprefix("torch.")))
    return found


class OnnxModel:
    """An ONNX Runtime session answering as a torch model does: a tensor in, a tensor out.
    `provider` is the execution provider the session runs on (recorded by the stage)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        first = session.get_inputs()[0]
        self._input = first.name
        self._output = session.get_outputs()[0].name
        self.input_shape = tuple(size if isinstance(size, int) else 1 for size in first.shape)
        """The graph's input shape, a symbolic dimension (a dynamic batch) as 1."""
        self.provider = str(session.get_providers()[0])
        self.output_names = [output.name for output in session.get_outputs()]

    def declared_inputs(self) -> list[DeclaredInput]:
        """The graph's inputs: name, shape (a symbolic dimension as None), element type."""
        return [
            (
                graph_input.name,
                tuple(size if isinstance(size, int) else None for size in graph_input.shape),
                ONNX_ELEMENT_TYPES.get(graph_input.type, graph_input.type),
            )
            for graph_input in self._session.get_inputs()
        ]

    def run_named(self, feed: dict[str, Any]) -> list[Any]:
        """Every graph output (numpy arrays, in `output_names` order) for the inputs fed by
        name (numpy arrays): a model of several inputs or outputs."""
        return list(self._session.run(None, feed))

    def __call__(self, x: Any) -> Any:
        import torch

        feed = {self._input: x.detach().to("cpu").numpy()}
        return torch.from_numpy(self._session.run([self._output], feed)[0])

    def to(self, *args: Any, **kwargs: Any) -> OnnxModel:
        return self  # it runs where its execution provider runs

    def train(self, mode: bool = True) -> OnnxModel:
        if mode:
            raise ModelFileError("an ONNX model runs inference only: it does not train")
        return self


def input_shape(model: Any) -> tuple[int, ...] | None:
    """The input shape a loaded model file declares (a symbolic dimension, such as a dynamic
    batch, as 1), or None when it declares none (a TorchScript module)."""
    if isinstance(model, OnnxModel):
        return model.input_shape
    shape = getattr(model, INPUT_SHAPE_ATTRIBUTE, None)
    return None if shape is None else tuple(int(size) for size in shape)


def declared_inputs(model: Any) -> list[DeclaredInput] | None:
    """The inputs a loaded model file declares (an ONNX graph's, a `torch.export` program's),
    or None when it declares none (a TorchScript module)."""
    if isinstance(model, OnnxModel):
        return model.declared_inputs()
    return getattr(model, INPUTS_ATTRIBUTE, None)


def load_onnx_model(entry: ModelEntry, device: str, threads: int | None) -> OnnxModel:
    """An ONNX Runtime session of `entry` on the execution provider of `device` (CUDA on a
    cuda device, the CPU otherwise), with `threads` intra-op threads (None: its default)."""
    import onnxruntime

    entry = located(entry)

    wanted = onnx_execution_provider(device)
    if wanted not in onnxruntime.get_available_providers():
        raise ModelFileError(
            f"{entry.location}: ONNX Runtime here has no {wanted} (for device {device}; "
            "install onnxruntime-gpu for CUDA)"
        )
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    try:
        session = onnxruntime.InferenceSession(
            entry.location, sess_options=options, providers=[wanted]
        )
    except Exception as error:  # not ONNX, a corrupt graph, an operator it does not know
        raise ModelFileError(
            f"{entry.location}: cannot load as onnx: {model_file_reason(error)}"
        ) from error
    return OnnxModel(session)


def _hf_folder(entry: ModelEntry) -> Any:
    from stages.library.models.hf_folders import load_hf_classifier

    return load_hf_classifier(entry)


TORCH_LOADERS: dict[ModelFormat, Callable[[ModelEntry], Any]] = {
    "hf_folder": _hf_folder,
    "torchvision_weights": _torchvision_weights,
    "torchscript": _torchscript,
    "torch_export": _torch_export,
}
"""Format -> loader of the formats a torch module comes from."""

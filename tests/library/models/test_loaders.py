"""Model files a user brings, loaded as torch modules (`stages.library.models.loaders`): each
format gives the same answers as the model it was made from; a pickled full model and a
corrupt file are refused with one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from safetensors.torch import save_file

from stages.artifacts.vision_artifacts import build_digits_cnn
from stages.library.models.common import ModelFileError
from stages.library.models.loaders import load_onnx_model, load_torch_model
from stages.spec.model_entry import ModelEntry


@pytest.fixture(scope="module")
def digits() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return build_digits_cnn().eval(), torch.randn(4, 1, 8, 8)


def test_torchscript_and_torch_export_files_answer_as_their_model(
    tmp_path: Path, digits: tuple[torch.nn.Module, torch.Tensor]
) -> None:
    model, x = digits
    with torch.inference_mode():
        expected = model(x)
    torch.jit.trace(model, x).save(str(tmp_path / "m.ts"))
    torch.export.save(torch.export.export(model, (x,)), str(tmp_path / "m.pt2"))
    for entry in (
        ModelEntry(torchscript=str(tmp_path / "m.ts")),
        ModelEntry(torch_export=str(tmp_path / "m.pt2")),
    ):
        with torch.inference_mode():
            answer = load_torch_model(entry)(x)
        torch.testing.assert_close(answer, expected)


def test_torchvision_weights_load_from_safetensors_and_state_dicts(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = torchvision.models.get_model("squeezenet1_1", weights=None, num_classes=7).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.inference_mode():
        expected = model(x)
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    torch.save(model.state_dict(), tmp_path / "w.pt")
    for name in ("w.safetensors", "w.pt"):
        loaded = load_torch_model(ModelEntry(weights=str(tmp_path / name), arch="squeezenet1_1"))
        with torch.inference_mode():
            torch.testing.assert_close(loaded(x), expected)  # 7 classes, read from the file


def test_a_pickled_full_model_is_refused_before_it_runs(
    tmp_path: Path, digits: tuple[torch.nn.Module, torch.Tensor]
) -> None:
    torch.save(digits[0], tmp_path / "full.pt")
    entry = ModelEntry(weights=str(tmp_path / "full.pt"), arch="resnet18")
    with pytest.raises(ModelFileError, match=r"full\.pt: holds pickled objects, not only tensors"):
        load_torch_model(entry)


def test_a_corrupt_file_fails_with_the_loaders_reason_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.ts").write_bytes(b"not a torchscript archive")
    with pytest.raises(ModelFileError) as raised:
        load_torch_model(ModelEntry(torchscript=str(tmp_path / "bad.ts")))
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"{tmp_path / 'bad.ts'}: cannot load as torchscript: ")


@pytest.mark.slow
def test_an_onnx_file_answers_as_its_model_through_onnx_runtime(
    tmp_path: Path, digits: tuple[torch.nn.Module, torch.Tensor]
) -> None:
    model, x = digits
    with torch.inference_mode():
        expected = model(x)
    torch.onnx.export(
        model,
        (x,),
        str(tmp_path / "m.onnx"),
        input_names=["images"],
        output_names=["logits"],
        dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
    )
    onnx_model = load_onnx_model(ModelEntry(onnx=str(tmp_path / "m.onnx")), "cpu", threads=1)
    assert onnx_model.provider == "CPUExecutionProvider"
    torch.testing.assert_close(onnx_model(x), expected, rtol=1e-4, atol=1e-5)
    # The same top-1 answers as the torch model, on another batch size (a dynamic batch).
    y = torch.randn(9, 1, 8, 8)
    with torch.inference_mode():
        assert torch.equal(onnx_model(y).argmax(1), model(y).argmax(1))
    with pytest.raises(ModelFileError, match="does not train"):
        onnx_model.train(True)


def test_a_file_that_is_not_onnx_fails_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(ModelFileError) as raised:
        load_onnx_model(ModelEntry(onnx=str(tmp_path / "bad.onnx")), "cpu", threads=None)
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"{tmp_path / 'bad.onnx'}: cannot load as onnx: ")

"""A model entry in a spec (`stages.spec.model_entry`): one location key; the folder or file
resolved against the spec's folder, kept inside the model roots, of the kind its key names
and, when pinned, of the content its `sha256` names; the content's hash filled in and counted
by the spec hash in place of the location."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from stages import settings
from stages.spec.model_entry import (
    MODEL_ROOTS_ENV,
    ModelEntry,
    content_sha256,
    onnx_external_files,
)
from stages.validation.loading import SpecError, load_spec

SPEC = """\
name: byo
pipelines:
  - name: p
    loadgen: {{type: closed_loop, concurrency: 1, duration_s: 1}}
    stages:
      - {{id: data, type: dataset.digits, outputs: [prep]}}
      - id: prep
        type: torchvision.preprocess
        outputs: [model]
        config: {{mean: [0.5], std: [0.5]}}
      - id: model
        type: torchvision.classify
        config: {{model: {model}}}
"""
WHERE = "pipelines[0].stages[2].config.model"


def _spec(folder: Path, model: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(SPEC.format(model=model))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as raised:
        load_spec(path)
    return raised.value.lines()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({}, "give exactly one of"),
        ({"onnx": "a.onnx", "torchscript": "a.ts"}, "found: onnx, torchscript"),
        ({"weights": "w.safetensors"}, "`weights` needs `arch`"),
        ({"onnx": "a.onnx", "arch": "resnet18"}, "`arch` goes with `weights`"),
        ({"onnx": "a.onnx", "trust_remote_code": True}, "applies to a `path` folder only"),
    ],
)
def test_an_entry_names_exactly_one_location(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelEntry.model_validate(entry)


def test_a_file_beside_the_spec_is_filled_in_with_its_content_hash(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "digits.ts").write_bytes(b"model bytes")
    loaded = load_spec(_spec(tmp_path, "{torchscript: models/digits.ts}"))
    entry = loaded.normalized["pipelines"][0]["stages"][2]["config"]["model"]
    assert entry["torchscript"] == str((tmp_path / "models" / "digits.ts").resolve())
    assert entry["sha256"] == hashlib.sha256(b"model bytes").hexdigest()


def test_the_spec_hash_follows_the_content_not_the_location(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, name in ((first, "m.ts"), (second, "renamed.ts")):
        folder.mkdir()
        (folder / name).write_bytes(b"same content")
    hash_a = load_spec(_spec(first, "{torchscript: m.ts}")).spec_hash
    hash_b = load_spec(_spec(second, "{torchscript: renamed.ts}")).spec_hash
    assert hash_a == hash_b
    (second / "renamed.ts").write_bytes(b"other content")
    assert load_spec(second / "spec.yaml").spec_hash != hash_a


def test_bad_locations_get_one_line_each(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "m.onnx"
    outside.parent.mkdir()
    outside.write_bytes(b"x")
    spec_dir = tmp_path / "spec"
    (spec_dir / "folder.ts").mkdir(parents=True)
    cases = {
        "{torchscript: missing.ts}": "does not exist",
        f"{{torchscript: {outside}}}": "is outside the model roots",
        "{torchscript: folder.ts}": "is not a file",
        "{torchscript: ../elsewhere/m.onnx}": "is outside the model roots",
    }
    for model, message in cases.items():
        (line,) = _problems(_spec(spec_dir, model))
        assert line.startswith(f"{spec_dir / 'spec.yaml'}: {WHERE}.torchscript: ")
        assert message in line


def test_a_model_root_admits_a_file_outside_the_spec_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.ts").write_bytes(b"x")
    monkeypatch.setenv(MODEL_ROOTS_ENV, str(models))
    loaded = load_spec(_spec(tmp_path / "spec", f"{{torchscript: {models / 'm.ts'}}}"))
    assert loaded.normalized["pipelines"][0]["stages"][2]["config"]["model"]["sha256"]


def test_a_pinned_hash_refuses_changed_content(tmp_path: Path) -> None:
    model = tmp_path / "m.ts"
    model.write_bytes(b"version 1")
    pinned = content_sha256(model)
    spec = _spec(tmp_path, f"{{torchscript: m.ts, sha256: {pinned}}}")
    assert load_spec(spec).normalized["pipelines"][0]["stages"][2]["config"]["model"]
    model.write_bytes(b"version 2, longer")
    (line,) = _problems(spec)
    assert "is not the content `sha256` pins" in line


def test_a_folder_hash_covers_names_and_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"w")
    before = content_sha256(folder)
    (folder / "model.safetensors").rename(folder / "weights.safetensors")
    assert content_sha256(folder) != before


def test_model_stages_refuse_formats_they_cannot_run(tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    (tmp_path / "m.onnx").write_bytes(b"x")
    for model, wanted in (
        ("{onnx: m.onnx}", "training takes torchscript, torchvision_weights entries, not onnx"),
        ("{path: hf}", "training takes torchscript, torchvision_weights entries, not hf_folder"),
    ):
        training = SPEC.replace("torchvision.classify", "torchvision.train").format(model=model)
        (tmp_path / "spec.yaml").write_text(training)
        (line,) = _problems(tmp_path / "spec.yaml")
        assert wanted in line


def test_an_artifact_location_names_a_model_artefact_of_its_kind(tmp_path: Path) -> None:
    """`artifact:<name>`: a file entry takes a model file artefact, a `path` entry a model
    folder artefact; the normal form keeps the name (the recipe), nothing is built to validate."""
    assert _problems(_spec(tmp_path, "{onnx: 'artifact:tiny_lm'}")) == [
        f"{tmp_path / 'spec.yaml'}: {WHERE}.onnx: no model file artefact 'tiny_lm'; known: "
        "digits_cnn_onnx, digits_cnn_pt2"
    ]
    (line,) = _problems(_spec(tmp_path, "{path: 'artifact:digits'}"))
    assert "no model folder artefact 'digits'; known: " in line and "tiny_lm" in line
    loaded = load_spec(_spec(tmp_path, "{onnx: 'artifact:digits_cnn_onnx'}"))
    entry = loaded.normalized["pipelines"][0]["stages"][2]["config"]["model"]
    assert entry["onnx"] == "artifact:digits_cnn_onnx" and entry.get("sha256") is None
    assert not (settings.artifacts_dir() / "digits_cnn_onnx").exists()


def test_an_onnx_files_external_data_is_hashed_and_kept_inside_the_roots(tmp_path: Path) -> None:
    """The weights an exporter writes beside an ONNX file (`m.onnx.data`) are part of the
    model: changing them changes the content hash, and a missing one is refused."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.arange(640, dtype=np.float32).reshape(64, 10), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],  # 10 classes
        [weights],
    )
    folder = tmp_path / "spec"
    folder.mkdir()
    onnx.save_model(
        helper.make_model(graph), str(folder / "m.onnx"), save_as_external_data=True,
        all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0,
    )  # fmt: skip
    data = folder / "m.onnx.data"
    assert onnx_external_files(folder / "m.onnx") == [data.resolve()]
    first = content_sha256(folder / "m.onnx")
    blob = bytearray(data.read_bytes())
    blob[0] ^= 1
    data.write_bytes(bytes(blob))
    assert content_sha256(folder / "m.onnx") != first  # the weights changed, the .onnx did not
    load_spec(_spec(folder, "{onnx: m.onnx}"))  # resolves, inside the roots
    data.unlink()
    (line,) = _problems(_spec(folder, "{onnx: m.onnx}"))
    assert f"{data}, the external data m.onnx names, is missing or outside the model roots" in line

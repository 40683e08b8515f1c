"""Local Hugging Face model folders brought as `model: {path: DIR}`
(`stages.library.models.hf_folders`): tiny_lm and minilm through their folders answer as they
do by name; a small HF image classifier runs in `torchvision.classify` as it runs alone; a
folder's own code runs only when the entry and the environment both allow it; a folder that
does not load fails prepare with one line naming it. Every model here is made in the test:
nothing is downloaded."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import save_file
from typer.testing import CliRunner

from stages.artifacts.registry import ensure_artifact
from stages.cli.app import app
from stages.library.models.common import ModelFileError
from stages.library.text.embed import EmbedConfig, EmbedStage
from stages.library.text.generate import GenerateConfig, GenerateStage
from stages.library.vision.datasets import DigitsDatasetStage
from stages.library.vision.torchvision_stages import ClassifyStage
from stages.runtime.query import Query
from stages.runtime.stage import Stage, StageContext
from stages.spec.model_entry import ALLOW_REMOTE_CODE_ENV, content_sha256
from stages.validation.loading import load_spec

SMALL_LM = {"prompts_size": 64, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 400}
PROMPTS = ["How does batching affect tail latency?", "Why?"]
TEXT_SPEC = """\
name: byo-hf
pipelines:
  - name: p
    loadgen: {{type: closed_loop, concurrency: 1, duration_s: 1}}
    stages:
      - {{id: prompts, type: dataset.prompts, outputs: [model]}}
      - id: model
        type: transformers.generate
        config: {{model: {model}}}
"""


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-home")


@pytest.fixture(autouse=True)
def home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLLOBENCH_HOME", str(shared_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # everything here is local
    monkeypatch.delenv(ALLOW_REMOTE_CODE_ENV, raising=False)
    return shared_home


def make(stage_class: type[Stage], config: dict[str, Any], stage_index: int = 0) -> Any:
    stage = stage_class(
        stage_class.config_model.model_validate(config),
        StageContext(stage_id="s", stage_index=stage_index, seed=5),
    )
    stage.prepare()
    return stage


def answer(stage: Stage, payload: Any, query_id: int = 0) -> Query:
    query = Query(query_id, 0, payload=payload, stage_count=2)
    assert stage.run(query) is None
    return query


def tiny_lm_folder() -> Path:
    return ensure_artifact("tiny_lm", SMALL_LM).path


# --------------------------------------------------------------------------- text models


@pytest.mark.slow
def test_tiny_lm_through_its_folder_generates_the_named_models_tokens() -> None:
    folder = tiny_lm_folder()
    options = {"max_new_tokens": 6, "max_prompt_tokens": 32, "threads": 1}
    by_name = make(GenerateStage, {"model_params": SMALL_LM, **options}, stage_index=1)
    by_path = make(GenerateStage, {"model": {"path": str(folder)}, **options}, stage_index=1)
    named, brought = answer(by_name, {"prompt": PROMPTS}), answer(by_path, {"prompt": PROMPTS})
    assert brought.tokens == named.tokens == 12
    assert brought.payload["text"] == named.payload["text"]  # same weights: same greedy tokens
    assert by_path.model_label == f"path:{folder.name}@{content_sha256(folder)[:12]}"


def test_minilm_through_its_folder_embeds_as_by_name() -> None:
    folder = ensure_artifact("minilm").path
    texts = ["GPU memory bandwidth limits large batches.", "apple pie"]
    by_name = make(EmbedStage, {"threads": 1}, stage_index=1)
    by_path = make(EmbedStage, {"model": {"path": str(folder)}, "threads": 1}, stage_index=1)
    named = answer(by_name, {"prompt": texts}).payload["embedding"]
    brought = answer(by_path, {"prompt": texts}).payload["embedding"]
    assert brought.shape == (2, 384)
    np.testing.assert_array_equal(brought, named)


def test_a_text_folder_entry_is_hashed_into_the_spec(tmp_path: Path) -> None:
    folder = tmp_path / "lm"
    shutil.copytree(tiny_lm_folder(), folder)
    spec = tmp_path / "spec.yaml"
    spec.write_text(TEXT_SPEC.format(model="{path: lm}"))
    entry = load_spec(spec).normalized["pipelines"][0]["stages"][1]["config"]["model"]
    assert entry["path"] == str(folder.resolve())
    assert entry["sha256"] == content_sha256(folder)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model": {"onnx": "m.onnx"}}, "a text model entry is a Hugging Face folder"),
        ({"model": {"path": "lm", "labels": [1, 0]}}, "not for a text model"),
        ({"model": {"path": "lm"}, "model_params": {"seed": 1}}, "not for a folder"),
    ],
)
def test_text_configs_refuse_what_a_folder_cannot_be(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GenerateConfig.model_validate(config)
    if "model_params" not in config:
        with pytest.raises(ValidationError, match=message):
            EmbedConfig.model_validate(config)


def test_a_folder_without_its_tokenizer_fails_prepare_on_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(tiny_lm_folder() / name, folder / name)
    for broken in (False, True):
        if broken:  # and with a config that is not JSON
            (folder / "config.json").write_text("{not json")
        with pytest.raises(ModelFileError) as raised:
            make(GenerateStage, {"model": {"path": str(folder)}, "threads": 1}, stage_index=1)
        (line,) = str(raised.value).splitlines()
        assert line.startswith(f"{folder}: cannot load as hf_folder: ")
        assert ("not a valid JSON" if broken else "tokenizer is empty") in line


# --------------------------------------------------------------------------- image classifier


def test_an_hf_image_classifier_folder_runs_in_classify_as_alone(tmp_path: Path) -> None:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=8,
        patch_size=4,
        num_channels=1,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    config.num_labels = 10  # the digits' classes
    model = ViTForImageClassification(config).eval()
    model.save_pretrained(tmp_path / "vit")
    data = make(DigitsDatasetStage, {"split": "test", "batch_size": 40, "shuffle": False})
    classify = make(ClassifyStage, {"model": {"path": str(tmp_path / "vit")}, "threads": 1})
    for index in range(3):
        query = answer(data, None, query_id=index)
        images, labels = query.payload["images"], query.payload["labels"]
        classify.run(query)
        with torch.inference_mode():
            expected = model(pixel_values=images.float()).logits.argmax(1)
        assert query.payload["predictions"].shape == (40,) and query.graded == 40
        assert torch.equal(query.payload["predictions"], expected)
        assert query.correct == int((expected == labels).sum())


# --------------------------------------------------------------------------- remote code


def _validate(spec: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["validate", str(spec)])
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def test_remote_code_needs_the_entry_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lm").mkdir()
    spec = tmp_path / "spec.yaml"
    spec.write_text(TEXT_SPEC.format(model="{path: lm, trust_remote_code: true}"))
    code, lines = _validate(spec)
    assert code == 2, lines
    (line,) = lines
    assert line.startswith(
        f"{spec}: pipelines[0].stages[1].config.model.trust_remote_code: "
    ) and line.endswith(f"needs {ALLOW_REMOTE_CODE_ENV}=1 in the environment as well")
    monkeypatch.setenv(ALLOW_REMOTE_CODE_ENV, "1")
    code, lines = _validate(spec)
    assert code == 0, lines


CUSTOM_CONFIG = """\
from transformers import PretrainedConfig


class TinyCustomConfig(PretrainedConfig):
    model_type = "tiny-custom"
"""
CUSTOM_MODEL = """\
import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import ImageClassifierOutput

from .configuration_tiny import TinyCustomConfig


class TinyCustomClassifier(PreTrainedModel):
    config_class = TinyCustomConfig

    def __init__(self, config):
        super().__init__(config)
        self.linear = torch.nn.Linear(64, config.num_labels)
        self.post_init()

    def forward(self, pixel_values):
        return ImageClassifierOutput(logits=self.linear(pixel_values.flatten(1)))
"""


def _custom_code_folder(folder: Path) -> torch.nn.Linear:
    """A classifier folder whose model class is its own code (auto_map), and that layer."""
    folder.mkdir()
    (folder / "configuration_tiny.py").write_text(CUSTOM_CONFIG)
    (folder / "modeling_tiny.py").write_text(CUSTOM_MODEL)
    auto_map = {
        "AutoConfig": "configuration_tiny.TinyCustomConfig",
        "AutoModelForImageClassification": "modeling_tiny.TinyCustomClassifier",
    }
    labels = {str(index): str(index) for index in range(10)}
    config = {"model_type": "tiny-custom", "auto_map": auto_map, "id2label": labels}
    (folder / "config.json").write_text(json.dumps(config))
    torch.manual_seed(3)
    layer = torch.nn.Linear(64, 10)
    weights = {f"linear.{name}": value for name, value in layer.state_dict().items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return layer


def test_a_folders_own_code_runs_only_when_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers.dynamic_module_utils as dynamic

    # transformers copies the folder's code into its modules cache: keep that in tmp_path
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    layer = _custom_code_folder(tmp_path / "custom")
    entry = {"path": str(tmp_path / "custom")}
    with pytest.raises(ModelFileError, match=r"cannot load as hf_folder: .* contains custom code"):
        make(ClassifyStage, {"model": entry})  # the entry does not ask: transformers refuses
    trusted = {**entry, "trust_remote_code": True}
    with pytest.raises(ModelFileError, match=f"needs {ALLOW_REMOTE_CODE_ENV}=1"):
        make(ClassifyStage, {"model": trusted})  # the entry asks, the environment does not
    monkeypatch.setenv(ALLOW_REMOTE_CODE_ENV, "1")
    classify = make(ClassifyStage, {"model": trusted})
    images = torch.rand(5, 1, 8, 8)
    query = answer(classify, {"images": images, "labels": None})
    with torch.inference_mode():
        assert torch.equal(query.payload["predictions"], layer(images.flatten(1)).argmax(1))

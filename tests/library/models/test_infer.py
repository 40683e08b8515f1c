"""`model.infer` (stages/library/models/infer.py) on small models made here: a two-input model
saved as ONNX, a `torch.export` program and TorchScript runs on seeded synthetic inputs or the
payload's, gives the same answers in every format, returns argmax, topk and raw outputs,
grades labelled batches; declared inputs that do not fit the file fail prepare on one line, a
bad config fails `collobench validate` with its YAML path, and a spec with no dataset runs
end to end through the CLI into Parquet and DuckDB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from analysis.warehouse.reader import run_query
from stages.cli.app import app
from stages.library.models.common import ModelFileError
from stages.library.models.infer import InferStage
from stages.runtime.query import Query
from stages.runtime.stage import StageContext
from tests.helpers import REPO

BATCH = 3
INPUTS = [
    {"name": "x", "shape": [BATCH, 4], "dtype": "float32"},
    {"name": "ids", "shape": [BATCH, 2], "dtype": "int64"},
]
FILES = {"onnx": "m.onnx", "torch_export": "m.pt2", "torchscript": "m.ts"}


class TwoInputs(torch.nn.Module):
    """Features and token ids in, 6 class scores out (or the scores and the hidden features)."""

    def __init__(self, both: bool = False) -> None:
        super().__init__()
        self.features = torch.nn.Linear(4, 6)
        self.tokens = torch.nn.Embedding(16, 6)
        self.both = both

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> Any:
        hidden = self.features(x) + self.tokens(ids).sum(1)
        return (hidden.relu(), hidden) if self.both else hidden


def _save_all(model: torch.nn.Module, folder: Path, outputs: list[str]) -> None:
    """`model` as ONNX (inputs x and ids, a dynamic batch), a torch.export program (a dynamic
    batch) and TorchScript, under FILES' names in `folder`."""
    x, ids = torch.randn(BATCH, 4), torch.randint(0, 16, (BATCH, 2))
    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (x, ids), dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(program, str(folder / FILES["torch_export"]))
    torch.jit.trace(model, (x, ids)).save(str(folder / FILES["torchscript"]))
    axes = {name: {0: "batch"} for name in ["x", "ids", *outputs]}
    torch.onnx.export(
        model,
        (x, ids),
        str(folder / FILES["onnx"]),
        input_names=["x", "ids"],
        output_names=outputs,
        dynamic_axes=axes,
        external_data=False,  # one self-contained file (a spec's entry names one file)
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    model = TwoInputs().eval()
    folder = tmp_path_factory.mktemp("infer-models")
    _save_all(model, folder, ["scores"])
    return folder, model


def make(config: dict[str, Any], seed: int = 5) -> InferStage:
    stage = InferStage(
        InferStage.config_model.model_validate({"threads": 1, **config}),
        StageContext(stage_id="infer", seed=seed),
    )
    stage.prepare()
    return stage


def entry(folder: Path, key: str) -> dict[str, str]:
    return {key: str(folder / FILES[key])}


def answer(stage: InferStage, payload: Any = None) -> Query:
    query = Query(0, 0, payload=payload, stage_count=1)
    assert stage.run(query) is None
    return query


@pytest.mark.parametrize("key", sorted(FILES))
def test_synthetic_inputs_run_in_every_format(
    model_dir: tuple[Path, torch.nn.Module], key: str
) -> None:
    folder, model = model_dir
    stage = make({"model": entry(folder, key), "inputs": INPUTS})
    first = answer(stage).payload
    assert set(first) == {"outputs"}
    assert first["outputs"].dtype == torch.int64 and tuple(first["outputs"].shape) == (BATCH,)
    # The synthetic inputs: built once, from the declaration, seeded by the stage's seed.
    x, ids = stage._synthetic
    assert x.dtype == torch.float32 and ids.dtype == torch.int64 and int(ids.max()) < 16
    with torch.inference_mode():
        assert torch.equal(first["outputs"], model(x, ids).argmax(-1))
    assert torch.equal(answer(stage).payload["outputs"], first["outputs"])
    # Another seed, another draw; a pipeline's stage seed (its 63-bit seed times 1_000_003,
    # plus the stage's index) is wider than 64 bits.
    other = make({"model": entry(folder, key), "inputs": INPUTS}, seed=(2**63 - 1) * 1_000_003)
    assert not torch.equal(other._synthetic[0], x)


def test_every_format_gives_the_same_argmax_on_the_payloads_inputs(
    model_dir: tuple[Path, torch.nn.Module],
) -> None:
    folder, model = model_dir
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(8, 4, generator=generator, dtype=torch.float64).numpy()  # converted
    ids = torch.randint(0, 16, (8, 2), generator=generator)
    with torch.inference_mode():
        expected = model(torch.as_tensor(x).float(), ids).argmax(-1)
    assert len(set(expected.tolist())) > 1  # the answers differ between samples
    for key in FILES:
        stage = make({"model": entry(folder, key), "inputs": INPUTS})
        payload = {"x": x, "ids": ids, "note": "kept"}
        out = answer(stage, payload).payload
        assert torch.equal(out["outputs"], expected), key
        assert out["note"] == "kept" and out["x"] is x  # the payload's fields travel on
        assert set(payload) == {"x", "ids", "note"}  # the payload given is left alone


def test_labels_in_the_payload_are_graded(model_dir: tuple[Path, torch.nn.Module]) -> None:
    folder, model = model_dir
    x, ids = torch.randn(5, 4), torch.randint(0, 16, (5, 2))
    with torch.inference_mode():
        predicted = model(x, ids).argmax(-1)
    labels = predicted.clone()
    labels[:2] = (labels[:2] + 1) % 6  # two wrong
    stage = make({"model": entry(folder, "onnx"), "inputs": INPUTS})
    query = answer(stage, {"x": x, "ids": ids, "labels": labels})
    assert (query.graded, query.correct) == (5, 3)
    ungraded = answer(stage, {"x": x, "ids": ids})
    assert ungraded.graded is None and ungraded.correct is None


def test_topk_gives_the_k_largest_values_and_their_indices(
    model_dir: tuple[Path, torch.nn.Module],
) -> None:
    folder, model = model_dir
    x, ids = torch.randn(4, 4), torch.randint(0, 16, (4, 2))
    with torch.inference_mode():
        values, indices = model(x, ids).topk(3, dim=-1)
    for key in FILES:
        stage = make({"model": entry(folder, key), "inputs": INPUTS, "outputs": "topk", "k": 3})
        out = answer(stage, {"x": x, "ids": ids}).payload["outputs"]
        assert torch.equal(out["indices"], indices), key
        torch.testing.assert_close(out["values"], values, rtol=1e-4, atol=1e-5)
    with pytest.raises(ModelFileError, match=r"`k` is 7 but the output's last dimension is 6"):
        make({"model": entry(folder, "onnx"), "inputs": INPUTS, "outputs": "topk", "k": 7})


def test_raw_gives_the_tensor_or_every_named_output(
    model_dir: tuple[Path, torch.nn.Module], tmp_path: Path
) -> None:
    folder, model = model_dir
    x, ids = torch.randn(2, 4), torch.randint(0, 16, (2, 2))
    with torch.inference_mode():
        scores = model(x, ids)
    stage = make({"model": entry(folder, "torch_export"), "inputs": INPUTS, "outputs": "raw"})
    torch.testing.assert_close(answer(stage, {"x": x, "ids": ids}).payload["outputs"], scores)
    torch.manual_seed(3)
    both = TwoInputs(both=True).eval()
    _save_all(both, tmp_path, ["activated", "hidden"])
    with torch.inference_mode():
        activated, hidden = both(x, ids)
    expected_names = {"onnx": ["activated", "hidden"], "torchscript": ["output0", "output1"]}
    for key, names in expected_names.items():
        stage = make({"model": entry(tmp_path, key), "inputs": INPUTS, "outputs": "raw"})
        out = answer(stage, {"x": x, "ids": ids}).payload["outputs"]
        assert list(out) == names, key
        torch.testing.assert_close(out[names[0]], activated, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out[names[1]], hidden, rtol=1e-4, atol=1e-5)


def _with(changes: dict[str, Any], name: str = "x") -> list[dict[str, Any]]:
    return [{**spec, **changes} if spec["name"] == name else spec for spec in INPUTS]


@pytest.mark.parametrize(
    ("key", "inputs", "message"),
    [
        ("onnx", _with({"name": "features"}), "declared inputs ['features', 'ids'] but the file's"),
        ("onnx", INPUTS[:1], "declared inputs ['x'] but the file's are ['x', 'ids']"),
        ("onnx", _with({"shape": [BATCH, 4, 1]}), "input 'x' has rank 2 in the file ([?, 4])"),
        ("onnx", _with({"shape": [BATCH, 5]}), "input 'x' dimension 1 is 4 in the file"),
        ("onnx", _with({"dtype": "int32"}, "ids"), "input 'ids' is int64 in the file"),
        ("torch_export", INPUTS[:1], "1 inputs declared but the file takes 2"),
        ("torch_export", _with({"shape": [BATCH]}), "input 'x' has rank 2 in the file"),
        ("torchscript", _with({"shape": [BATCH, 5]}), "the call on the declared inputs failed"),
    ],
)
def test_declared_inputs_that_do_not_fit_the_file_fail_prepare_on_one_line(
    model_dir: tuple[Path, torch.nn.Module], key: str, inputs: list[Any], message: str
) -> None:
    folder, _ = model_dir
    with pytest.raises(ModelFileError) as raised:
        make({"model": entry(folder, key), "inputs": inputs})
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"{folder / FILES[key]}: "), line
    assert message in line, line


def test_a_payload_with_some_declared_inputs_is_an_error(
    model_dir: tuple[Path, torch.nn.Module],
) -> None:
    stage = make({"model": entry(model_dir[0], "onnx"), "inputs": INPUTS})
    with pytest.raises(ValueError, match="holds some declared inputs but not ids"):
        answer(stage, {"x": torch.zeros(BATCH, 4)})


# --------------------------------------------------------------------------- specs


def spec_text(config: str) -> str:
    return f"""\
name: infer
pipelines:
  - name: infer
    loadgen: {{type: closed_loop, concurrency: 1, duration_s: 1}}
    stages:
      - id: model
        type: model.infer
        config: {config}
"""


INPUTS_YAML = "[{name: x, shape: [3, 4]}, {name: ids, shape: [3, 2], dtype: int64}]"
BAD_CONFIGS = [
    ("topk without k", {"outputs": "topk"}, "config: `outputs: topk` needs `k`"),
    (
        "k below 1",
        {"outputs": "topk", "k": "0"},
        "config.k: Input should be greater than or equal to 1",
    ),
    ("k without topk", {"k": "2"}, "config: `outputs: topk` needs `k`, and `k` goes with"),
    (
        "weights entry",
        {"model": "{weights: m.onnx, arch: resnet18}"},
        "config.model: model.infer runs onnx, torch_export, torchscript entries, not "
        "torchvision_weights",
    ),
    ("labels", {"model": "{onnx: m.onnx, labels: [1, 2]}"}, "config.model: model.infer reports"),
    ("float16 onnx", {"dtype": "float16"}, "config: an ONNX model runs as exported"),
    (
        "bad dtype",
        {"inputs": "[{name: x, shape: [3], dtype: str}]"},
        "config.inputs[0].dtype: Input should be 'float32'",
    ),
    (
        "zero dim",
        {"inputs": "[{name: x, shape: [0, 4]}]"},
        "config.inputs[0].shape[0]: Input should be greater",
    ),
    ("no inputs", {"inputs": "[]"}, "config.inputs: List should have at least 1 item"),
    (
        "same names",
        {"inputs": "[{name: x, shape: [1]}, {name: x, shape: [2]}]"},
        "config: input names must differ: x repeated",
    ),
    ("no model", {"model": None}, "config.model: required key is missing"),
]


@pytest.mark.parametrize(
    ("label", "changes", "expected"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_configs_give_one_line_and_exit_2(
    tmp_path: Path, label: str, changes: dict[str, str | None], expected: str
) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    config: dict[str, str | None] = {"model": "{onnx: m.onnx}", "inputs": INPUTS_YAML, **changes}
    flow = ", ".join(f"{key}: {value}" for key, value in config.items() if value is not None)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text("{" + flow + "}"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"{path}: pipelines[0].stages[0].{expected}"), lines[0]


def test_a_good_config_validates(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(f"{{model: {{onnx: m.onnx}}, inputs: {INPUTS_YAML}}}"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


@pytest.mark.spawns
def test_a_spec_without_a_dataset_runs_on_synthetic_inputs_through_the_cli(
    model_dir: tuple[Path, torch.nn.Module], tmp_path: Path
) -> None:
    folder, _ = model_dir
    (tmp_path / "m.onnx").write_bytes((folder / "m.onnx").read_bytes())
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(f"{{model: {{onnx: m.onnx}}, inputs: {INPUTS_YAML}, threads: 1}}"))
    db = tmp_path / "results.duckdb"
    environment = {**os.environ, "COLLOBENCH_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    command = [sys.executable, "-m", "stages.cli", "run", str(spec), "--out",
               str(tmp_path / "runs"), "--db", str(db), "--no-mlflow"]  # fmt: skip
    completed = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=180
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = [e for e in pq.read_table(run_dir / "stage_events.parquet").to_pylist()]
    model_events = [e for e in events if e["stage"] == "model"]
    assert len(model_events) > 10
    assert all(e["status"] == "ok" for e in model_events)
    _, rows = run_query(db, "SELECT count(*) FROM stage_events WHERE stage = 'model'")
    assert rows[0][0] == len(model_events)

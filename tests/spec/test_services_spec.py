"""The `services:` block of a spec: one-line problems, the `command` opt-in (exit 2 without it),
model paths inside the allowed roots, credentials kept out of `env`, hashes of older specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stages.cli.app import app
from stages.validation.loading import SpecError, load_spec
from stages.validation.paths import with_resolved_files

runner = CliRunner()

BASE = """
name: served
pipelines:
  - name: p
    loadgen: {type: server, rate: 5, duration_s: 1}
    stages:
      - {id: s, type: noop}
"""


def spec_with(tmp_path: Path, services: str) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + "services:\n" + services)
    return path


def problems(tmp_path: Path, services: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec(spec_with(tmp_path, services))
    return [str(problem) for problem in caught.value.problems]


TRANSFORMERS = "  - {name: lm, type: transformers.serve, model: {path: model}}\n"
COMMAND = "  - {name: stub, type: command, command: [python, -m, http.server, '{port}']}\n"


def test_a_command_service_without_the_opt_in_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLLOBENCH_ALLOW_COMMANDS", raising=False)
    result = runner.invoke(app, ["validate", str(spec_with(tmp_path, COMMAND))])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "services[0].type: command services run a program from the spec; "
        "set COLLOBENCH_ALLOW_COMMANDS=1 to allow them"
    )


def test_a_command_service_with_the_opt_in_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")
    loaded = load_spec(spec_with(tmp_path, COMMAND))
    assert loaded.spec.services[0].command == ["python", "-m", "http.server", "{port}"]


def test_a_spec_without_services_keeps_its_hash(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(BASE)
    empty = tmp_path / "empty.yaml"
    empty.write_text(BASE + "services: []\n")
    loaded = load_spec(plain)
    assert "services" not in loaded.normalized
    assert loaded.spec_hash == load_spec(empty).spec_hash
    with_service = load_spec(spec_with(tmp_path, TRANSFORMERS))
    assert with_service.normalized["services"][0]["port"] == 0
    assert with_service.spec_hash != loaded.spec_hash


def test_an_artefact_model_validates(tmp_path: Path) -> None:
    services = "  - {name: lm, type: transformers.serve, model: {artifact: tiny_lm}}\n"
    model = load_spec(spec_with(tmp_path, services)).spec.services[0].model
    assert model is not None and model.artifact == "tiny_lm"


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "aws_secret_access_key", "DB_AUTH"])
def test_credential_names_are_refused_in_env(tmp_path: Path, name: str) -> None:
    services = f"  - {{name: lm, type: vllm.serve, model: {{path: model}}, env: {{{name}: x}}}}\n"
    assert problems(tmp_path, services) == [
        f"services[0].env: {name!r} looks like a credential and the spec is recorded; "
        "list it in `pass_env` instead"
    ]


def test_ordinary_env_names_are_kept(tmp_path: Path) -> None:
    services = (
        "  - {name: lm, type: vllm.serve, model: {path: model},"
        " env: {TOKENIZERS_PARALLELISM: 'false', OMP_NUM_THREADS: '4'}, pass_env: [HF_TOKEN]}\n"
    )
    service = load_spec(spec_with(tmp_path, services)).spec.services[0]
    assert service.env == {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "4"}
    assert service.pass_env == ["HF_TOKEN"]


def test_defaults_fill_in(tmp_path: Path) -> None:
    service = load_spec(spec_with(tmp_path, TRANSFORMERS)).spec.services[0]
    assert (service.port, service.restart, service.warmup_requests) == (0, "once", 0)
    assert service.ready.path is None and service.ready.timeout_s == 300.0
    assert service.device == "cpu" and service.args == [] and service.env == {}


BAD_SERVICES = [
    (
        "unknown type",
        "  - {name: lm, type: vlm.serve, model: {path: model}}\n",
        "services[0].type: unknown service type 'vlm.serve' (did you mean 'vllm.serve'?)",
    ),
    (
        "duplicate name",
        TRANSFORMERS + TRANSFORMERS,
        "services[1].name: duplicate service name 'lm' (also services[0])",
    ),
    (
        "a pipeline's name",
        "  - {name: p, type: vllm.serve, model: {path: model}}\n",
        "services[0].name: service name 'p' is also a pipeline's name; telemetry names both alike",
    ),
    (
        "no model",
        "  - {name: lm, type: vllm.serve}\n",
        "services[0].model: a vllm.serve service needs `model`",
    ),
    (
        "both model sources",
        "  - {name: lm, type: vllm.serve, model: {path: model, artifact: tiny_lm}}\n",
        "services[0].model: give exactly one of `artifact` or `path`",
    ),
    (
        "unknown artefact",
        "  - {name: lm, type: vllm.serve, model: {artifact: tiny_llm}}\n",
        "services[0].model.artifact: unknown artefact 'tiny_llm'; known:",
    ),
    (
        "external without url",
        "  - {name: api, type: external}\n",
        "services[0].url: an external service needs `url`",
    ),
    (
        "host in args",
        "  - {name: lm, type: llama.cpp, model: {path: model}, args: [--host=0.0.0.0]}\n",
        "services[0].args[0]: --host is set by the benchmark",
    ),
    (
        "unknown key",
        "  - {name: lm, type: vllm.serve, model: {path: model}, prot: 80}\n",
        "services[0].prot: unknown key 'prot' (did you mean 'port'?)",
    ),
    (
        "credential in env",
        "  - {name: lm, type: vllm.serve, model: {path: model}, env: {HF_TOKEN: hf_x}}\n",
        "services[0].env: 'HF_TOKEN' looks like a credential and the spec is recorded; "
        "list it in `pass_env` instead",
    ),
    (
        "bad ready path",
        "  - {name: lm, type: vllm.serve, model: {path: model}, ready: {path: health}}\n",
        "services[0].ready.path: String should match pattern",
    ),
    (
        "restart",
        "  - {name: lm, type: vllm.serve, model: {path: model}, restart: always}\n",
        "services[0].restart: Input should be 'once' or 'per_phase'",
    ),
    (
        "model outside the roots",
        "  - {name: lm, type: vllm.serve, model: {path: /etc}}\n",
        "services[0].model.path: '/etc' resolves to /etc, outside the allowed roots",
    ),
]


@pytest.mark.parametrize(
    ("services", "expected"),
    [case[1:] for case in BAD_SERVICES],
    ids=[case[0] for case in BAD_SERVICES],
)
def test_bad_services_give_one_line_each(tmp_path: Path, services: str, expected: str) -> None:
    found = problems(tmp_path, services)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found


def test_relative_model_paths_resolve_against_the_spec_folder(tmp_path: Path) -> None:
    loaded = load_spec(spec_with(tmp_path, TRANSFORMERS))
    resolved = with_resolved_files(loaded.spec, tmp_path)
    model = resolved.services[0].model
    assert model is not None and model.path == str((tmp_path / "model").resolve())

"""Each service type's argv: loopback host always, the port, the model, `args` appended; the
environment from placement, `env` and `pass_env`; the `command` opt-in enforced at start too."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from stages.services.registry import UnknownServiceTypeError, default_service_registry
from stages.services.service_type import LOOPBACK_HOST, ServiceType
from stages.spec.services import ServiceSpec


def service(type_: str, **fields: Any) -> ServiceSpec:
    return ServiceSpec.model_validate({"name": "svc", "type": type_, **fields})


def build(type_: str, port: int = 8123, model: str | None = "/m", **fields: Any) -> list[str]:
    return default_service_registry().get(type_).command(service(type_, **fields), port, model)


def test_transformers_serve_runs_this_python_on_loopback() -> None:
    argv = build("transformers.serve", args=["--continuous-batching"])
    assert argv == [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--device",
        "cpu",
        "--continuous-batching",
    ]


def test_transformers_serve_on_a_placed_gpu_is_told_cuda_0() -> None:
    argv = build("transformers.serve", device="cuda:1")
    assert argv[argv.index("--device") + 1] == "cuda:0"
    assert build("transformers.serve", device="cuda")[-1] == "cuda"


def test_transformers_serve_checks_no_update_and_stays_offline_unless_told() -> None:
    transformers = default_service_registry().get("transformers.serve")
    quiet = transformers.environment(service("transformers.serve"), {})
    assert quiet == {"HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_OFFLINE": "1"}
    told = transformers.environment(service("transformers.serve", env={"HF_HUB_OFFLINE": "0"}), {})
    assert told["HF_HUB_OFFLINE"] == "0"


def test_vllm_serve() -> None:
    argv = build("vllm.serve", args=["--max-num-seqs", "64"])
    assert argv == [
        "vllm", "serve", "/m", "--host", "127.0.0.1", "--port", "8123", "--max-num-seqs", "64"
    ]  # fmt: skip


def test_sglang_serve() -> None:
    argv = build("sglang.serve", port=30000, args=["--mem-fraction-static", "0.5"])
    assert argv == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "/m",
        "--host", "127.0.0.1", "--port", "30000", "--mem-fraction-static", "0.5",
    ]  # fmt: skip


def test_llama_cpp_offloads_every_layer_on_cuda_unless_told() -> None:
    assert build("llama.cpp", model="/m.gguf") == [
        "llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "8123"
    ]  # fmt: skip
    assert build("llama.cpp", device="cuda")[-2:] == ["--n-gpu-layers", "999"]
    told = build("llama.cpp", device="cuda", args=["-ngl", "20"])
    assert "999" not in told and told[-2:] == ["-ngl", "20"]


def test_external_starts_nothing_and_uses_its_url() -> None:
    external = default_service_registry().get("external")
    spec = service("external", url="http://10.0.0.5:8000/")
    assert external.command(spec, 0, None) == []
    assert not external.starts_process
    assert external.base_url(spec, 0) == "http://10.0.0.5:8000"
    assert external.ready_path(spec) == "/v1/models"
    assert external.warmup_request(spec, None) == ("/v1/models", {})


def test_started_services_are_reached_on_loopback() -> None:
    registry = default_service_registry()
    for name in ("transformers.serve", "vllm.serve", "sglang.serve", "llama.cpp", "command"):
        spec = service(name)
        assert registry.get(name).base_url(spec, 9000) == f"http://{LOOPBACK_HOST}:9000"
        assert isinstance(registry.get(name), ServiceType)


def test_command_needs_the_opt_in_even_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["python", "-m", "http.server", "--bind", "{host}", "{port}"]
    spec: dict[str, Any] = {"command": argv}
    monkeypatch.delenv("COLLOBENCH_ALLOW_COMMANDS", raising=False)
    with pytest.raises(PermissionError, match="COLLOBENCH_ALLOW_COMMANDS=1"):
        build("command", **spec)
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")
    assert build("command", port=7, **spec) == [
        "python", "-m", "http.server", "--bind", "127.0.0.1", "7"
    ]  # fmt: skip


def test_environment_from_placement_env_and_pass_env() -> None:
    spec = service(
        "vllm.serve",
        device="cuda",
        placement={"gpu": 1, "mps_thread_percentage": 30},
        env={"VLLM_LOGGING_LEVEL": "INFO"},
        pass_env=["HF_TOKEN", "ABSENT"],
    )
    environment = (
        default_service_registry()
        .get("vllm.serve")
        .environment(spec, {"HF_TOKEN": "hf_secret", "OTHER": "x"})
    )
    assert environment == {
        "CUDA_VISIBLE_DEVICES": "1",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "VLLM_LOGGING_LEVEL": "INFO",
        "HF_TOKEN": "hf_secret",
    }


def test_openai_types_warm_up_with_a_one_token_completion() -> None:
    registry = default_service_registry()
    path, body = registry.get("vllm.serve").warmup_request(service("vllm.serve"), "/m")
    assert path == "/v1/completions" and body["max_tokens"] == 1 and body["model"] == "/m"
    assert registry.get("command").warmup_request(service("command"), None) == ("/", {})


def test_an_unknown_type_names_the_registered_ones() -> None:
    with pytest.raises(UnknownServiceTypeError, match=r"did you mean 'llama\.cpp'"):
        default_service_registry().get("llama.cp")

"""The built-in service types: argv builders for OpenAI-compatible inference servers.

`transformers.serve` runs here (on CPU, in this environment's Python); `vllm.serve`,
`sglang.serve` and `llama.cpp` are command builders for GPU hosts, unit-tested only: their
programs are not installed here. `external` starts nothing; `command` runs the spec's own argv
and exists only with `COLLOBENCH_ALLOW_COMMANDS=1`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from stages.services.service_type import (
    ALLOW_COMMANDS_ENV,
    LOOPBACK_HOST,
    ServiceType,
    commands_allowed,
)
from stages.spec.services import ServiceSpec

WARMUP_PROMPT = "Hello"


class OpenAICompatible(ServiceType):
    """A server speaking the OpenAI API: warmed with a one-token completion."""

    def warmup_request(self, spec: ServiceSpec, model: str | None) -> tuple[str, dict[str, Any]]:
        return "/v1/completions", {"model": model or "", "prompt": WARMUP_PROMPT, "max_tokens": 1}


def _model(model: str | None, name: str) -> str:
    if model is None:
        raise ValueError(f"a {name} service needs a model")
    return model


class TransformersServe(OpenAICompatible):
    """Hugging Face's `transformers serve` (needs the `transformers[serving]` extra); pass
    `--continuous-batching` in `args` for continuous batching with paged attention."""

    name = "transformers.serve"
    distribution = "transformers"

    def environment(self, spec: ServiceSpec, environ: Mapping[str, str]) -> dict[str, str]:
        """No PyPI update check at start-up and no hub access (the model is a local folder);
        `env` may say otherwise."""
        offline = {"HF_HUB_DISABLE_UPDATE_CHECK": "1", "HF_HUB_OFFLINE": "1"}
        return {**offline, **super().environment(spec, environ)}

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "transformers.cli.transformers",
            "serve",
            _model(model, self.name),
            "--host",
            LOOPBACK_HOST,
            "--port",
            str(port),
            "--device",
            self.device(spec),
            *spec.args,
        ]


class VllmServe(OpenAICompatible):
    """vLLM's OpenAI-compatible server, `vllm serve MODEL` (GPU hosts)."""

    name = "vllm.serve"
    distribution = "vllm"

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        argv = ["vllm", "serve", _model(model, self.name), "--host", LOOPBACK_HOST]
        return [*argv, "--port", str(port), *spec.args]


class SglangServe(OpenAICompatible):
    """SGLang's server, `python -m sglang.launch_server` (GPU hosts)."""

    name = "sglang.serve"
    distribution = "sglang"

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path"]
        argv += [_model(model, self.name), "--host", LOOPBACK_HOST, "--port", str(port)]
        return [*argv, *spec.args]


GPU_LAYER_FLAGS = ("-ngl", "--n-gpu-layers", "--gpu-layers")


class LlamaCppServer(OpenAICompatible):
    """llama.cpp's `llama-server -m MODEL.gguf`; on a cuda device every layer is offloaded
    (`--n-gpu-layers 999`) unless `args` says otherwise."""

    name = "llama.cpp"

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        argv = ["llama-server", "-m", _model(model, self.name), "--host", LOOPBACK_HOST]
        argv += ["--port", str(port)]
        offload_given = any(arg.split("=", 1)[0] in GPU_LAYER_FLAGS for arg in spec.args)
        if spec.device.startswith("cuda") and not offload_given:
            argv += ["--n-gpu-layers", "999"]
        return [*argv, *spec.args]


class ExternalService(OpenAICompatible):
    """A server the user runs at `url`: probed and warmed, never started or stopped."""

    name = "external"
    default_ready_path = "/v1/models"
    starts_process = False
    needs_model = False

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        return []

    def base_url(self, spec: ServiceSpec, port: int) -> str:
        return (spec.url or "").rstrip("/")

    def warmup_request(self, spec: ServiceSpec, model: str | None) -> tuple[str, dict[str, Any]]:
        """GET the ready path: which model an external server serves is not known here."""
        return ServiceType.warmup_request(self, spec, model)

    def check(self, spec: ServiceSpec, environ: Mapping[str, str]) -> list[tuple[str, str]]:
        problems = super().check(spec, environ)
        if spec.url is None:
            problems.append(("url", "an external service needs `url`"))
        return problems


class CommandService(ServiceType):
    """The spec's own argv (`command`), `{host}`, `{port}` and `{model}` replaced: only with
    COLLOBENCH_ALLOW_COMMANDS=1, so a spec dropped into a watched folder runs no program."""

    name = "command"
    default_ready_path = "/"
    needs_model = False
    needs_opt_in = True

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        if not commands_allowed():
            raise PermissionError(f"command services need {ALLOW_COMMANDS_ENV}=1")
        values = {"host": LOOPBACK_HOST, "port": str(port), "model": model or ""}
        argv = [_substitute(part, values) for part in spec.command or []]
        return [*argv, *spec.args]

    def check(self, spec: ServiceSpec, environ: Mapping[str, str]) -> list[tuple[str, str]]:
        if not commands_allowed(environ):
            return [
                (
                    "type",
                    "command services run a program from the spec; set "
                    f"{ALLOW_COMMANDS_ENV}=1 to allow them",
                )
            ]
        problems = super().check(spec, environ)
        if spec.command is None:
            problems.append(("command", "a command service needs `command` (its argv)"))
        return problems


def _substitute(part: str, values: Mapping[str, str]) -> str:
    """`{port}` style placeholders replaced; other braces kept as written."""
    for key, value in values.items():
        part = part.replace("{" + key + "}", value)
    return part


BUILT_IN_SERVICE_TYPES: tuple[type[ServiceType], ...] = (
    TransformersServe,
    VllmServe,
    SglangServe,
    LlamaCppServer,
    ExternalService,
    CommandService,
)
"""The service types collobench ships, registered by stages.services.registry."""

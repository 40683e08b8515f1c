"""The `services:` block of a spec: servers the benchmark starts (or, `external`, only uses)
beside its pipelines, such as an OpenAI-compatible inference server a `http.openai` stage calls.

`type` names a registered service type (`stages.services.registry`), checked in
`stages.validation.checks` like stage types. What a type needs beyond the common fields (`url` for
`external`, `command` for the opt-in `command` type) is checked there too, one line per problem.

Secrets: the normal form of the spec, `env` included, is recorded in the manifest. So `env`
refuses names with a word that says credential (`HF_TOKEN`, `OPENAI_API_KEY`, `*_SECRET_*`,
`*_PASSWORD`, `*_CREDENTIALS`, `*_AUTH`); such a variable is passed by name with `pass_env`,
from the environment of `collobench run`, and only its name is recorded.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from stages.spec.base import StrictModel

SERVICE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
SECRET_ENV_NAME = re.compile(
    r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)", re.IGNORECASE
)
"""An `env` name with one of these words (`HF_TOKEN`, `OPENAI_API_KEY`) looks like a credential:
refused (pass it with `pass_env`). `TOKENIZERS_PARALLELISM` is fine."""


class ServiceModelSpec(StrictModel):
    """The model a service serves: a built artefact by name, or a folder on disk."""

    artifact: str | None = Field(
        None, description="Name of a built artefact (`collobench artifacts list`)."
    )
    path: str | None = Field(
        None,
        description="A model folder or file (a GGUF file for llama.cpp), relative to the "
        "spec's folder; it must lie inside the allowed roots.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ServiceModelSpec:
        if (self.artifact is None) == (self.path is None):
            raise ValueError("give exactly one of `artifact` or `path`")
        return self


class ServicePlacementSpec(StrictModel):
    """Where a service's processes run; applied to the process the benchmark starts."""

    cpus: list[int] | None = Field(None, min_length=1, description="CPU cores it may run on.")
    gpu: int | str | None = Field(
        None, description="GPU index or UUID (MIG UUIDs too) for CUDA_VISIBLE_DEVICES."
    )
    mps_thread_percentage: int | None = Field(
        None, ge=1, le=100, description="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in `mps` mode."
    )

    @field_validator("cpus")
    @classmethod
    def _cpus_non_negative(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(cpu < 0 for cpu in value):
            raise ValueError("cpu indices must be >= 0")
        return value


class ServiceReadySpec(StrictModel):
    """When a started service counts as ready: its health path answers 200 within a timeout."""

    path: str | None = Field(
        None,
        pattern=r"^/",
        description="Health path polled with GET on the service; null = the type's default "
        "(`/health` for transformers.serve, vllm.serve, sglang.serve and llama.cpp).",
    )
    timeout_s: float = Field(
        300.0, gt=0, le=3600, description="Give up (the run fails) after this many seconds."
    )


class ServiceMetricsSpec(StrictModel):
    """The server's Prometheus endpoint, scraped every period of each phase into
    `server_samples` (view `server_metrics` maps vLLM, SGLang and TGI names to common ones)."""

    path: str = Field(
        "/metrics",
        pattern=r"^/",
        description="Path of the Prometheus text endpoint on the service's host and port.",
    )
    period_ms: float = Field(
        1000.0, ge=50, le=60_000, description="Scrape every this many milliseconds."
    )
    timeout_ms: float = Field(
        1000.0,
        gt=0,
        le=2000,
        description="Give up a scrape after this many milliseconds (a failed scrape: `up` 0); "
        "at most 2 s, so a hung endpoint never holds up a phase's start or stop.",
    )
    buckets: bool = Field(
        False,
        description="Keep histogram `_bucket` series too (many rows per scrape); `_sum` and "
        "`_count` are always kept.",
    )


class ServiceSpec(StrictModel):
    """One server of the benchmark: started before the first phase, stopped at the end."""

    name: str = Field(..., pattern=SERVICE_NAME_PATTERN, description="Unique service name.")
    type: str = Field(
        ..., description="A registered service type (transformers.serve, vllm.serve, ...)."
    )
    model: ServiceModelSpec | None = Field(None, description="The model the server serves.")
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$", description="cpu | cuda | cuda:N")
    placement: ServicePlacementSpec = Field(default_factory=ServicePlacementSpec)
    port: int = Field(
        0, ge=0, le=65535, description="Loopback port it listens on; 0 = a free port."
    )
    args: list[str] = Field(
        default_factory=list, description="Extra command-line arguments, appended as given."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables set for the server (recorded: no credentials).",
    )
    pass_env: list[str] = Field(
        default_factory=list,
        description="Names of variables passed from the environment of `collobench run` "
        "(credentials such as HF_TOKEN); only the names are recorded.",
    )
    ready: ServiceReadySpec = Field(default_factory=ServiceReadySpec)
    warmup_requests: int = Field(
        0, ge=0, le=10_000, description="Requests sent after readiness, before any phase."
    )
    restart: Literal["once", "per_phase"] = Field(
        "once", description="once: up across all phases; per_phase: restarted for each phase."
    )
    metrics: ServiceMetricsSpec | None = Field(
        None,
        description="Scrape the server's Prometheus metrics during every phase (loopback only); "
        "null: not scraped.",
    )
    url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="external: the base URL of a server the user runs (nothing is started).",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="command type only (needs COLLOBENCH_ALLOW_COMMANDS=1): the argv; "
        "`{port}`, `{host}` and `{model}` are replaced.",
    )

    @model_serializer(mode="wrap")
    def _omit_no_metrics(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Leave `metrics: null` out of the dump, so the spec hash of every spec written before
        the field existed is unchanged."""
        data: dict[str, object] = handler(self)
        if data.get("metrics", False) is None:
            data.pop("metrics")
        return data

    @field_validator("env")
    @classmethod
    def _no_credentials(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.match(ENV_NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if SECRET_ENV_NAME.search(name):
                raise ValueError(
                    f"{name!r} looks like a credential and the spec is recorded; "
                    "list it in `pass_env` instead"
                )
        return value

    @field_validator("pass_env")
    @classmethod
    def _names_only(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.match(ENV_NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

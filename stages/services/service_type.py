"""What a service type is: the `ServiceType` base class and the loopback rules every type keeps.

A `ServiceType` turns a validated `ServiceSpec` into what the lifecycle needs: the argv of the
server (always bound to 127.0.0.1), its environment, the health path polled for readiness and
the warm-up request. The built-in types are in `stages.services.builders`; the registry
(`stages.services.registry`) collects them and the entry-point types.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from stages.contracts.placement_environment import narrowed_device, placement_environment
from stages.spec.services import ServiceSpec

LOOPBACK_HOST = "127.0.0.1"
ALLOW_COMMANDS_ENV = "COLLOBENCH_ALLOW_COMMANDS"
HOST_FLAGS = ("--host", "--bind", "--listen")
"""Flags that would move a server off loopback or off its port: refused in `args`."""
PORT_FLAGS = ("--port",)


def commands_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `COLLOBENCH_ALLOW_COMMANDS=1`: a spec may then run a program of its own."""
    return (os.environ if environ is None else environ).get(ALLOW_COMMANDS_ENV, "") == "1"


class ServiceType(ABC):
    """How to start, probe and warm one kind of server."""

    name: ClassVar[str] = ""
    default_ready_path: ClassVar[str] = "/health"
    starts_process: ClassVar[bool] = True
    needs_model: ClassVar[bool] = True
    needs_opt_in: ClassVar[bool] = False
    distribution: ClassVar[str | None] = None
    """The Python distribution whose program the server runs, for the manifest's
    `environment.server_programs` (its version there); None: not one (a binary, or nothing
    started)."""

    @abstractmethod
    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        """The argv that starts the server on LOOPBACK_HOST:`port`, serving `model` (a resolved
        path; None for a type that needs none), `spec.args` appended."""

    def ready_path(self, spec: ServiceSpec) -> str:
        return spec.ready.path or self.default_ready_path

    def base_url(self, spec: ServiceSpec, port: int) -> str:
        """Where clients reach the service: http://127.0.0.1:PORT for a started one."""
        return f"http://{LOOPBACK_HOST}:{port}"

    def environment(self, spec: ServiceSpec, environ: Mapping[str, str]) -> dict[str, str]:
        """Variables set for the server on top of the launcher's: placement, `env`, `pass_env`
        (taken from `environ`; a missing one is left unset)."""
        variables = self.placement_environment(spec)
        variables.update(spec.env)
        variables.update({name: environ[name] for name in spec.pass_env if name in environ})
        return variables

    def placement_environment(self, spec: ServiceSpec) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES and the MPS share of the server (its placement's GPU and
        share, whatever the collocation mode)."""
        placement = spec.placement
        return placement_environment(
            spec.device, gpu=placement.gpu, mps_thread_percentage=placement.mps_thread_percentage
        )

    def device(self, spec: ServiceSpec) -> str:
        """The device the server is told, once CUDA_VISIBLE_DEVICES narrowed its view."""
        return narrowed_device(spec.device, self.placement_environment(spec))

    def warmup_request(self, spec: ServiceSpec, model: str | None) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of one warm-up request; an empty body means GET."""
        return self.ready_path(spec), {}

    def check(self, spec: ServiceSpec, environ: Mapping[str, str]) -> list[tuple[str, str]]:
        """(field, message) for each way `spec` does not fit this type."""
        problems: list[tuple[str, str]] = []
        if self.needs_model and spec.model is None:
            problems.append(("model", f"a {self.name} service needs `model`"))
        if self.starts_process and spec.url is not None:
            problems.append(("url", "only used by `external` services"))
        if spec.command is not None and not self.needs_opt_in:
            problems.append(("command", "only used by `command` services"))
        for index, arg in enumerate(spec.args):
            flag = arg.split("=", 1)[0]
            if flag in HOST_FLAGS or flag in PORT_FLAGS:
                problems.append(
                    (
                        f"args.{index}",
                        f"{flag} is set by the benchmark (loopback host, `port`); remove it",
                    )
                )
        return problems

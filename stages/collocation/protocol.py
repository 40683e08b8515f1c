"""The worker <-> launcher protocol: every message either side sends, as a typed frozen
dataclass, and the one codec that turns them into pipe payloads and back.

worker -> launcher: `Ready`, then `Progress` twice a second, then `Done` or `Failed`.
launcher -> worker: `Start` (the common start instant of the load window); to a resident
worker (one kept between the runs of an A/B session), `NextTask` with its next run's task.

On the pipe a message is a plain dict: its `kind` plus its fields (the counters,
`stages.contracts.counters.QueryCounters`, as a dict), so what crosses a process boundary is
data, not pickled classes. `decode` accepts exactly the fields of the named kind: an unknown
kind, a missing field or an unknown field raises `ProtocolError`, so a counter renamed on one
side fails loudly instead of reading 0.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from stages.contracts.counters import QueryCounters
from stages.contracts.errors import RunFailedError


class ProtocolError(RunFailedError, RuntimeError):
    """A pipe payload that is not a message of this protocol (or not the one expected)."""


@dataclass(frozen=True)
class Ready:
    """The worker prepared (models loaded, stage threads started) and waits for `Start`."""

    pid: int


@dataclass(frozen=True)
class Start:
    """Start issuing at `start_ns` (time.monotonic_ns, the same clock in every process)."""

    start_ns: int


@dataclass(frozen=True)
class NextTask:
    """A resident worker's next load window (`stages.collocation.resident_workers`): the
    `WorkerTask` of a new run, as its fields."""

    task: dict[str, Any]


@dataclass(frozen=True)
class Progress:
    """Live counters during the load window."""

    counters: QueryCounters


@dataclass(frozen=True)
class Done:
    """The load window ended (also after SIGTERM: status failed, what was measured is kept)."""

    status: str  # ok | failed | timeout
    error: str | None
    stopped_by: str | None  # why the load generator stopped issuing; None when interrupted
    not_issued: int
    leaked_threads: list[str]
    counters: QueryCounters
    stage_warnings: list[dict[str, Any]]
    """What the stages warned about: `{stage, message, visits}` each (`StageContext.warn`)."""


@dataclass(frozen=True)
class Failed:
    """The worker raised before it could report `Done`."""

    error: str
    traceback: str | None


Message = Ready | Start | NextTask | Progress | Done | Failed

KINDS: dict[str, type[Message]] = {
    "ready": Ready,
    "start": Start,
    "next_task": NextTask,
    "progress": Progress,
    "done": Done,
    "failed": Failed,
}
_KIND_OF: dict[type[Message], str] = {cls: kind for kind, cls in KINDS.items()}

_Expected = TypeVar("_Expected", Ready, Start, NextTask, Progress, Done, Failed)


def kind_of(message: Message) -> str:
    """The wire name of a message's kind (what progress events are named after)."""
    return _KIND_OF[type(message)]


def encode(message: Message) -> dict[str, Any]:
    """The pipe payload of `message`."""
    payload: dict[str, Any] = {"kind": kind_of(message)}
    for field in fields(message):
        value = getattr(message, field.name)
        payload[field.name] = value.model_dump() if isinstance(value, BaseModel) else value
    return payload


def decode(payload: object) -> Message:
    """The message a pipe payload holds; raises `ProtocolError` unless it is exactly one."""
    if not isinstance(payload, Mapping):
        raise ProtocolError(f"a message is a dict with a 'kind', got {payload!r}")
    kind = payload.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r} (known: {', '.join(KINDS)})")
    body = {name: value for name, value in payload.items() if name != "kind"}
    message: Message = _build(cls, body, str(kind))
    return message


def _field_names(cls: type[Any]) -> set[str]:
    if issubclass(cls, BaseModel):
        return set(cls.model_fields)
    return {field.name for field in fields(cls)}


def _build(cls: type[Any], body: Mapping[str, Any], where: str) -> Any:
    """`cls` from exactly its fields; nested model fields (the counters) are built the same
    way, and a value of the wrong type in them is a `ProtocolError` too."""
    names = _field_names(cls)
    missing = sorted(names - body.keys())
    unknown = sorted(set(body) - names)
    if missing or unknown:
        raise ProtocolError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    values = dict(body)
    for name, nested in _NESTED.get(cls, {}).items():
        if not isinstance(values[name], Mapping):
            raise ProtocolError(f"{where}.{name}: expected a dict, got {values[name]!r}")
        values[name] = _build(nested, values[name], f"{where}.{name}")
    if issubclass(cls, BaseModel):
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise ProtocolError(f"{where}: {error.errors()[0]['msg']}") from None
    return cls(**values)


def _nested_models(cls: type[Any]) -> dict[str, type[BaseModel]]:
    hints = typing.get_type_hints(cls)
    return {
        field.name: hints[field.name]
        for field in fields(cls)
        if isinstance(hints[field.name], type) and issubclass(hints[field.name], BaseModel)
    }


# The model-valued fields of every message class, by class (resolved once, at import).
_NESTED = {cls: _nested_models(cls) for cls in KINDS.values()}


def send(connection: Connection, message: Message) -> None:
    """Send one message (raises OSError when the other end is gone)."""
    connection.send(encode(message))


def receive(connection: Connection) -> Message:
    """Receive one message (raises EOFError when the other end closed, ProtocolError when
    what arrived is not a message)."""
    return decode(connection.recv())


def expect(message: Message, cls: type[_Expected]) -> _Expected:
    """`message`, which must be a `cls`: a message out of turn is a `ProtocolError`."""
    if not isinstance(message, cls):
        raise ProtocolError(f"expected a {_KIND_OF[cls]} message, got {message!r}")
    return message

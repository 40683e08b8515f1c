"""Trace files replayed by `loadgen.type: trace`: the public LLM trace formats by name and a
column mapping for any other, read into requests (an arrival offset, the samples a query
carries, and where the trace says so the request's shape: input and output token counts and
Mooncake's prefix `hash_ids`).

    offsets   CSV or Parquet: offset_ms, samples, input_tokens, output_tokens, hash_ids
    mooncake  JSON lines: timestamp (ms), input_length, output_length, hash_ids
              (kvcache-ai/Mooncake's FAST'25 traces)
    azure     CSV: TIMESTAMP (a date and time), ContextTokens, GeneratedTokens
              (Azure/AzurePublicDataset's LLM inference traces)
    burstgpt  CSV: Timestamp (s), Request tokens, Response tokens (HPMLL/BurstGPT)

A `trace_columns` mapping renames the columns a format reads. Offsets count from the trace's
start (an Azure trace's clock times from its first request), or from its window's
(`trace_start_s`, `trace_duration_s`, in trace time), and are multiplied by
`trace_time_scale`. Every problem is one line naming the file and the row: a missing column,
an offset that is negative or earlier than the one before, a length that is not a positive
integer.
"""

from __future__ import annotations

import csv
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from stages.contracts.errors import InvalidInputError
from stages.name_registry import NameRegistry
from stages.spec.loadgen import LoadgenBase, TraceColumns

SHAPE_FIELDS = ("input_tokens", "output_tokens", "hash_ids")
"""The request shape a trace row may carry: the query's payload (a dict of these) when the
trace has any of them, for the entry stage (dataset.synthetic_prompts) to honour."""


class TraceError(InvalidInputError, ValueError):
    """A trace file that cannot be replayed."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives and, where the trace says, its shape."""

    offset_ns: int
    samples: int
    shape: dict[str, Any] | None


class TraceFormat(ABC):
    """One trace file format: its default column names and how its offset column reads."""

    name: ClassVar[str]
    columns: ClassVar[TraceColumns]
    absolute: ClassVar[bool] = False
    """Offsets are clock times (replayed from the first request), not offsets from the
    trace's start (replayed as they are)."""

    def records(self, path: Path) -> list[dict[str, Any]]:
        """The file's rows as mappings (CSV, JSON lines or Parquet, by suffix)."""
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_table(path).to_pylist())
        if path.suffix in (".jsonl", ".json"):
            return _json_lines(path)
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))

    @abstractmethod
    def offsets_ms(self, values: list[Any], columns: TraceColumns, path: Path) -> list[float]:
        """The offset column's values as milliseconds (any origin: re-based later)."""


class _NumericOffsets(TraceFormat):
    """A format whose offset column is a number in the unit of `columns.offset_unit`."""

    def offsets_ms(self, values: list[Any], columns: TraceColumns, path: Path) -> list[float]:
        scale = 1000.0 if columns.offset_unit == "s" else 1.0
        return [_number(value, path, row) * scale for row, value in enumerate(values, 1)]


class OffsetsFormat(_NumericOffsets):
    name = "offsets"
    columns = TraceColumns(
        offset="offset_ms", offset_unit="ms", samples="samples", input_tokens="input_tokens",
        output_tokens="output_tokens", hash_ids="hash_ids",
    )  # fmt: skip


class MooncakeFormat(_NumericOffsets):
    name = "mooncake"
    columns = TraceColumns(
        offset="timestamp", offset_unit="ms", input_tokens="input_length",
        output_tokens="output_length", hash_ids="hash_ids",
    )  # fmt: skip


class BurstGptFormat(_NumericOffsets):
    name = "burstgpt"
    columns = TraceColumns(
        offset="Timestamp", offset_unit="s", input_tokens="Request tokens",
        output_tokens="Response tokens",
    )  # fmt: skip


class AzureFormat(TraceFormat):
    name = "azure"
    absolute = True
    columns = TraceColumns(
        offset="TIMESTAMP", input_tokens="ContextTokens", output_tokens="GeneratedTokens"
    )

    def offsets_ms(self, values: list[Any], columns: TraceColumns, path: Path) -> list[float]:
        return [_timestamp_ms(value, path, row) for row, value in enumerate(values, 1)]


class TraceFormats(NameRegistry[TraceFormat]):
    kind = "trace format"
    unknown_error = TraceError


TRACE_FORMATS = TraceFormats()
for _format in (OffsetsFormat(), MooncakeFormat(), AzureFormat(), BurstGptFormat()):
    TRACE_FORMATS.add(_format.name, _format)


def read_trace(path: Path, loadgen: LoadgenBase | None = None) -> list[TraceRequest]:
    """The requests of the trace file `path` as `loadgen` reads it (format, columns, window,
    time scale); a problem raises TraceError naming the file and the row."""
    if not path.exists():
        raise TraceError(f"{path}: trace file not found")
    trace_format = TRACE_FORMATS.get(getattr(loadgen, "trace_format", None) or "offsets")
    columns = _columns(trace_format, loadgen)
    try:
        records = trace_format.records(path)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise TraceError(f"{path}: not a {trace_format.name} trace: {_one_line(error)}") from None
    if not records or columns.offset not in records[0]:
        raise TraceError(f"{path}: needs a non-empty column `{columns.offset}`")
    values = [record.get(columns.offset) for record in records]
    offsets_ms = trace_format.offsets_ms(values, columns, path)
    default_samples = getattr(loadgen, "samples_per_query", 1)
    requests = []
    previous_ms = offsets_ms[0] if trace_format.absolute else 0.0
    for row, (record, offset_ms) in enumerate(zip(records, offsets_ms, strict=True), 1):
        if offset_ms < previous_ms or (offset_ms < 0 and not trace_format.absolute):
            raise TraceError(
                f"{path}: row {row}: offsets must be >= 0 and non-decreasing (got {offset_ms:g} "
                f"ms after {previous_ms:g} ms)"
            )
        previous_ms = offset_ms
        given = record.get(columns.samples) if columns.samples else None
        samples = _count(given, path, row, default_samples, "samples")
        requests.append((offset_ms, samples, _shape(record, columns, path, row)))
    return _windowed(requests, loadgen, requests[0][0] if trace_format.absolute else 0.0)


def _columns(trace_format: TraceFormat, loadgen: LoadgenBase | None) -> TraceColumns:
    given = getattr(loadgen, "trace_columns", None)
    if given is None:
        return trace_format.columns
    named = {key: value for key, value in given.model_dump().items() if value is not None}
    return trace_format.columns.model_copy(update=named)


def _shape(
    record: dict[str, Any], columns: TraceColumns, path: Path, row: int
) -> dict[str, Any] | None:
    shape: dict[str, Any] = {}
    for field in ("input_tokens", "output_tokens"):
        name = getattr(columns, field)
        if name is not None and record.get(name) not in (None, ""):
            shape[field] = _count(record[name], path, row, None, f"`{name}`")
    if columns.hash_ids is not None and record.get(columns.hash_ids) not in (None, ""):
        shape["hash_ids"] = _hash_ids(record[columns.hash_ids], path, row)
    return shape or None


def _windowed(
    requests: list[tuple[float, int, dict[str, Any] | None]],
    loadgen: LoadgenBase | None,
    origin_ms: float,
) -> list[TraceRequest]:
    """The requests inside the window (from `origin_ms` + trace_start_s), re-based to its
    start and time-scaled."""
    start_ms = origin_ms + 1000.0 * (getattr(loadgen, "trace_start_s", None) or 0.0)
    duration_s = getattr(loadgen, "trace_duration_s", None)
    end_ms = start_ms + 1000.0 * duration_s if duration_s is not None else float("inf")
    scale = getattr(loadgen, "trace_time_scale", None) or 1.0
    return [
        TraceRequest(round((offset_ms - start_ms) * scale * 1e6), samples, shape)
        for offset_ms, samples, shape in requests
        if start_ms <= offset_ms < end_ms
    ]


def _json_lines(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for row, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise TraceError(f"{path}: row {row}: not JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise TraceError(f"{path}: row {row}: not a JSON object")
            records.append(record)
    return records


def _number(value: Any, path: Path, row: int) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{path}: row {row}: offset {value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise TraceError(f"{path}: row {row}: offset {value!r} is not a finite number")
    return number


def _timestamp_ms(value: Any, path: Path, row: int) -> float:
    """An Azure trace's `2023-11-16 18:15:46.6805900` (seven fractional digits) in ms."""
    text = str(value).strip()
    whole, _, fraction = text.partition(".")
    try:
        stamp = datetime.fromisoformat(whole).timestamp()
        return (stamp + (float(f"0.{fraction}") if fraction else 0.0)) * 1000.0
    except ValueError:
        raise TraceError(f"{path}: row {row}: timestamp {text!r} is not a date and time") from None


def _count(value: Any, path: Path, row: int, default: int | None, what: str) -> int:
    if value in (None, "") and default is not None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (number >= 1 and number == int(number)):
        raise TraceError(f"{path}: row {row}: {what} {value!r} is not an integer >= 1")
    return int(number)


def _hash_ids(value: Any, path: Path, row: int) -> list[int]:
    """Mooncake's prefix block ids: a list, or its JSON text (CSV)."""
    try:
        ids = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        ids = None
    if not isinstance(ids, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in ids
    ):
        raise TraceError(f"{path}: row {row}: hash_ids must be a list of integers")
    return list(ids)


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:300]

"""Spec problems as one readable line each: `path: message`, the path pointing into the YAML.

Pydantic's errors are translated here: locations lose the tags of discriminated unions (the
`loadgen` variant), so a YAML author reads `pipelines[0].loadgen.rate`, the path they wrote.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

Location = tuple[int | str, ...]


@dataclass(frozen=True)
class SpecProblem:
    """One reason a spec is invalid, anchored at a path into the document."""

    path: str
    message: str

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return one_line(text)


def one_line(text: str) -> str:
    """Escape line breaks and other unprintable characters: one problem, one line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def format_location(location: Location) -> str:
    """('pipelines', 0, 'stages', 2) -> 'pipelines[0].stages[2]'."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not str(part).isidentifier():
            text += f"[{str(part)!r}]"  # a key a YAML author could not have meant as a name
        else:
            text += f".{part}" if text else str(part)
    return text


def did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or ''."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The model classes an annotation holds: X, list[X], X | None, Annotated[A | B, ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _variant_tagged(models: list[type[BaseModel]], tag: object) -> type[BaseModel] | None:
    """The member of a discriminated union whose `type` literal admits `tag`."""
    for model in models:
        field = model.model_fields.get("type")
        if field is not None and tag in typing.get_args(field.annotation):
            return model
    return None


def resolve_location(
    model: type[BaseModel] | None, location: Location
) -> tuple[Location, type[BaseModel] | None]:
    """`location` as the YAML author wrote it (union tags dropped), and the model it points at
    inside `model` (None when it points at no model)."""
    kept: list[int | str] = []
    current: type[BaseModel] | None = model
    candidates: list[type[BaseModel]] = []
    for part in location:
        if len(candidates) > 1:  # a discriminated union: this part is the variant's tag
            current = _variant_tagged(candidates, part)
            candidates = []
            if current is not None:
                continue
        kept.append(part)
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if current is not None else None
        candidates = _models_in(field.annotation) if field is not None else []
        current = candidates[0] if len(candidates) == 1 else None
    return tuple(kept), current


def _message(item: ErrorDetails, parent: type[BaseModel] | None) -> str:
    """The message of one pydantic error, worded for a YAML author."""
    message, kind = item["msg"], item["type"]
    if kind == "extra_forbidden":
        key = str(item["loc"][-1])
        allowed = list(parent.model_fields) if parent else []
        if parent is not None:  # a field with an alias is written by its alias
            allowed = [field.alias or name for name, field in parent.model_fields.items()]
        message = f"unknown key '{key}'{did_you_mean(key, allowed)}"
        if parent and not did_you_mean(key, allowed):
            message += f"; allowed: {', '.join(allowed) or 'none'}"
    elif kind == "missing":
        message = "required key is missing"
    elif kind.startswith("value_error") and message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    elif kind == "literal_error":
        message = f"{message}, got {item['input']!r}"
    elif kind == "model_attributes_type":  # a discriminated union given no mapping
        message = "Input should be a valid dictionary"
    elif kind == "union_tag_invalid":
        tags = str(item.get("ctx", {}).get("expected_tags", ""))
        head, _, last = tags.rpartition(", ")
        got = item["input"].get("type") if isinstance(item["input"], dict) else None
        message = f"Input should be {f'{head} or {last}' if head else last}, got {got!r}"
    return message


def problems_from_validation_error(
    error: ValidationError,
    prefix: Location = (),
    model: type[BaseModel] | None = None,
) -> list[SpecProblem]:
    """Turn pydantic errors into one readable problem each (`model`: what was validated)."""
    problems = []
    for item in error.errors(include_url=False):
        location, _ = resolve_location(model, tuple(item["loc"]))
        parent = None
        if item["type"] == "extra_forbidden":
            _, parent = resolve_location(model, tuple(item["loc"][:-1]))
        elif item["type"] == "union_tag_invalid":
            location = (*location, "type")  # the discriminator field is what is wrong
        # A model-level validator reports at its own location; keep the path to the model.
        problems.append(SpecProblem(format_location(prefix + location), _message(item, parent)))
    return problems

"""`collobench validate`, `schema` and `graph`: read specs without running them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from stages.cli.console import fail_input, out
from stages.cli.options import OverridesOption
from stages.validation.loading import SpecError, load_spec


def validate(
    specs: Annotated[list[Path], typer.Argument(help="Spec YAML files.", show_default=False)],
    overrides: OverridesOption = None,
) -> None:
    """Check spec files; print each one's hash, or one line per problem (exit 2)."""
    problems: list[str] = []
    for path in specs:
        try:
            loaded = load_spec(path, overrides or [])
        except SpecError as error:
            problems += error.lines()
            continue
        pipelines = ", ".join(p.name for p in loaded.spec.pipelines)
        out.print(f"{path}: ok ({pipelines}; spec hash {loaded.spec_hash[:12]})", highlight=False)
    if problems:
        raise fail_input(problems)


def schema() -> None:
    """Print the JSON Schema of the spec (for editor autocompletion)."""
    from stages.validation.schema import spec_json_schema

    sys.stdout.write(json.dumps(spec_json_schema(), indent=2) + "\n")


def graph(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file.", show_default=False)],
) -> None:
    """Print each pipeline's stage graph as Mermaid text."""
    from stages.runtime.graph import StageGraph

    loaded = load_spec(spec, [])
    for pipeline in loaded.spec.pipelines:
        sys.stdout.write(f"%% pipeline {pipeline.name}\n")
        sys.stdout.write(StageGraph.from_pipeline(pipeline).mermaid() + "\n")

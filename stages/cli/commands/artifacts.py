"""`collobench artifacts`: list the datasets and models collobench can build, and build them.

Stages build what they need on first use (in `prepare`, never inside a measured window); this
command builds ahead of a run, or shows what is built where.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from stages.cli.console import err, fail_input

artifacts_app = typer.Typer(
    help="List and build the datasets and models stages use (built locally, deterministic).",
    no_args_is_help=True,
)
out = Console()  # the terminal's width even in a pipe, as the table has always been printed


def _params(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values are read as YAML scalars (`seed=3` is an int)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail_input([f"--param {pair}: expected key=value"])
        params[key] = yaml.safe_load(value)
    return params


@artifacts_app.command("list")
def list_artifacts() -> None:
    """Every artefact name with what it is, and the builds found under $COLLOBENCH_HOME."""
    from stages.artifacts.registry import ARTIFACTS
    from stages.artifacts.store import METADATA, ArtifactStore

    store = ArtifactStore()
    table = Table("name", "kind", "what", "built here (content hash: params)")
    for name, builder in ARTIFACTS.entries().items():
        builds = []
        for metadata_path in sorted((store.root / name).glob(f"*/{METADATA}")):
            metadata = json.loads(metadata_path.read_text())
            params = ", ".join(f"{k}={v}" for k, v in metadata.get("params", {}).items())
            builds.append(f"{metadata_path.parent.name[:12]}: {params or 'defaults'}")
        table.add_row(name, builder.kind, builder.description, "\n".join(builds) or "-")
    out.print(table)
    out.print(f"store: {store.root}", highlight=False)


@artifacts_app.command("build")
def build(
    name: Annotated[str, typer.Argument(help="Artefact name (see `collobench artifacts list`).")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="A builder parameter, key=value (e.g. seed=1)."),
    ] = None,
) -> None:
    """Build an artefact (or find it built) and print its folder and metadata."""
    from stages.artifacts.registry import ensure_artifact

    started = time.monotonic()
    with err.status(f"building {name}...", spinner="dots"):
        built = ensure_artifact(name, _params(param or []))  # an ArtifactError: exit 2
    out.print(f"{built.name}: {built.path} ({time.monotonic() - started:.1f} s)", highlight=False)
    out.print_json(json.dumps(dict(built.metadata)))

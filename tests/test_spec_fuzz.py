"""Property test: whatever a mutated spec contains, `validate` exits 0 or 2, never crashes."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stages.cli.app import app
from tests.helpers import REPO

runner = CliRunner()
SEEDS = [yaml.safe_load(path.read_text()) for path in sorted((REPO / "specs").glob("*.yaml"))]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["noop", "sleep", "join", "priority", "server", "offline", "cuda", "x" * 300]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*prefix, index))
    return found


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    document = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        targets = paths(document)
        target = draw(st.sampled_from(targets))
        action = draw(st.sampled_from(["replace", "delete", "add_key", "rename"]))
        if not target:
            if action == "replace":
                document = draw(values)
            continue
        parent: Any = document
        for key in target[:-1]:
            parent = parent[key]
        last = target[-1]
        if action == "replace":
            parent[last] = draw(values)
        elif action == "delete":
            del parent[last]
        elif action == "add_key" and isinstance(parent[last], dict):
            parent[last][draw(st.text(min_size=1, max_size=8))] = draw(values)
        elif action == "rename" and isinstance(parent, dict):
            parent[last + draw(st.sampled_from(["s", "_", "X"]))] = parent.pop(last)
    return document


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_validate_never_raises(document: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
        result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert lines and all(line.startswith(f"{path}: ") for line in lines), result.output

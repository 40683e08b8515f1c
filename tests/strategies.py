"""Hypothesis strategies shared by the spec fuzz test and the hostile-input suite: the shipped
specs as seeds, hostile scalar values, and mutations of a spec document."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.helpers import REPO

SEEDS = [yaml.safe_load(path.read_text()) for path in sorted((REPO / "specs").glob("*.yaml"))]

# Text a YAML author could not have meant: control characters, NUL, right-to-left overrides,
# combining marks, lone surrogates (escaped by yaml.safe_dump, so still encodable) and emoji.
HOSTILE_CHARACTERS = ["\x00", "\x1b[31m", "\u202e", "\u200f", "\ufeff", "\u0301", "\ud800", "🦜"]
hostile_text = st.one_of(
    st.text(max_size=12),
    st.lists(st.sampled_from(HOSTILE_CHARACTERS) | st.text(max_size=3), max_size=6).map("".join),
)
huge_numbers = st.sampled_from(
    [10**18, -(10**18), 2**63, 2**64 + 1, 10**300, 1e308, -1e308, 1e-320, 10**4000]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["noop", "sleep", "join", "priority", "server", "offline", "cuda", "x" * 300]),
)
hostile_scalars = st.one_of(scalars, hostile_text, huge_numbers)


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and mappings of `leaves`, a few levels deep."""
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(st.text(max_size=8), children, max_size=3),
        ),
        max_leaves=6,
    )


values = nested(scalars)
hostile_values = nested(hostile_scalars)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a document (the root is `()`)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*prefix, index))
    return found


@st.composite
def mutated_specs(draw: st.DrawFn, leaf_values: st.SearchStrategy[Any] = values) -> Any:
    """A shipped spec with 1 to 4 values replaced, deleted, added or renamed."""
    document = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        targets = paths(document)
        target = draw(st.sampled_from(targets))
        action = draw(st.sampled_from(["replace", "delete", "add_key", "rename"]))
        if not target:
            if action == "replace":
                document = draw(leaf_values)
            continue
        parent: Any = document
        for key in target[:-1]:
            parent = parent[key]
        last = target[-1]
        if action == "replace":
            parent[last] = draw(leaf_values)
        elif action == "delete":
            del parent[last]
        elif action == "add_key" and isinstance(parent[last], dict):
            parent[last][draw(st.text(min_size=1, max_size=8))] = draw(leaf_values)
        elif action == "rename" and isinstance(parent, dict):
            parent[str(last) + draw(st.sampled_from(["s", "_", "X"]))] = parent.pop(last)
    return document

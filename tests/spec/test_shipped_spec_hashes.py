"""Every shipped spec hashes as it did before the structure work (issue 43): moving modules
must not change what a spec means. `shipped_spec_hashes.json` holds the hashes computed at
8f61578, the commit the restructuring started from; a spec whose meaning changes on purpose
updates its line there, and says why in the commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.validation.loading import load_spec
from tests.helpers import REPO

EXPECTED = json.loads((Path(__file__).parent / "shipped_spec_hashes.json").read_text())
SHIPPED = sorted(path.name for path in (REPO / "specs").glob("*.yaml"))


def test_every_shipped_spec_has_a_recorded_hash() -> None:
    assert sorted(EXPECTED) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_spec_hashes_as_recorded(name: str) -> None:
    assert load_spec(REPO / "specs" / name).spec_hash == EXPECTED[name]

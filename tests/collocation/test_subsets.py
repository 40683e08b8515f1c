"""`collocation.subsets`: which phases the launcher plans, their names, the 2^n guard, and the
spec hash of specs that do not use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from stages.cli.app import app
from stages.collocation.launcher import phases_of, subset_phase_name
from stages.validation.loading import validate_document

runner = CliRunner()


def spec_doc(names: str, subsets: str | None, repeats: int = 1) -> dict[str, Any]:
    collocation: dict[str, Any] = {} if subsets is None else {"subsets": subsets}
    return {
        "name": "subsets",
        "repeats": repeats,
        "collocation": collocation,
        "pipelines": [{"name": n, "stages": [{"id": "s", "type": "noop"}]} for n in names],
    }


def plan(names: str, subsets: str | None, repeats: int = 1) -> list[tuple[int, str, list[str]]]:
    spec = validate_document(spec_doc(names, subsets, repeats)).spec
    return [(trial, phase, [p.name for p in ps]) for trial, phase, ps in phases_of(spec)]


def test_pairs_add_one_phase_per_pair_after_the_full_set_and_abba_reverses() -> None:
    solo = [(0, "solo", ["c"]), (0, "solo", ["a"]), (0, "solo", ["b"])]
    pairs = [
        (0, "collocated:a+c", ["c", "a"]),  # names sorted in the phase, spec order in the list
        (0, "collocated:b+c", ["c", "b"]),
        (0, "collocated:a+b", ["a", "b"]),
    ]
    even = [*solo, (0, "collocated", ["c", "a", "b"]), *pairs]
    got = plan("cab", "pairs", repeats=2)
    assert got[: len(even)] == even
    # Odd trials run the whole order reversed (ABBA), subsets first, baselines last.
    assert got[len(even) :] == [(1, phase, names) for _, phase, names in even[::-1]]


def test_all_runs_every_subset_of_two_to_n_minus_one() -> None:
    phases = [phase for _, phase, _ in plan("abcd", "all")]
    subsets = [p for p in phases if p.startswith("collocated:")]
    assert len(subsets) == 6 + 4  # C(4,2) pairs + C(4,3) triples
    assert subsets[-1] == "collocated:b+c+d" and "collocated:a+b+c" in subsets
    assert phases.count("collocated") == 1 and phases.count("solo") == 4


def test_two_pipelines_and_none_add_nothing() -> None:
    assert plan("ab", "all") == plan("ab", "none") == plan("ab", None)
    assert [phase for _, phase, _ in plan("abc", "none")] == ["solo"] * 3 + ["collocated"]


def test_phase_name_sorts_names() -> None:
    assert subset_phase_name(["b", "a.x", "a"]) == "collocated:a+a.x+b"


def test_all_is_refused_above_six_pipelines_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(spec_doc("abcdefg", "all")))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if "collocation.subsets" in line]
    assert len(lines) == 1 and "at most 6 pipelines" in lines[0], result.output
    assert len(plan("abcdef", "all")) == 6 + 1 + (2**6 - 6 - 2)  # six are allowed


def test_pipeline_names_cannot_hold_the_separators(tmp_path: Path) -> None:
    for bad in ("a+b", "a:b"):
        doc = spec_doc("xy", "pairs")
        doc["pipelines"][0]["name"] = bad
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(doc))
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 2 and "pipelines[0].name" in result.output


def test_hash_of_a_spec_without_subsets_is_unchanged_by_the_field() -> None:
    """`subsets: none` is left out of the normal form, so specs written before the field (and
    their runs' hashes, which `compare` matches) keep their hash."""
    implicit = validate_document(spec_doc("ab", None))
    explicit = validate_document(spec_doc("ab", "none"))
    assert implicit.spec_hash == explicit.spec_hash
    assert "subsets" not in implicit.normalized["collocation"]
    pairs = validate_document(spec_doc("ab", "pairs"))
    assert pairs.spec_hash != implicit.spec_hash
    assert pairs.normalized["collocation"]["subsets"] == "pairs"

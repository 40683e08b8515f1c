"""The search's files survive a crash: each probe line is fsynced before the next probe, a line
torn by a kill is ignored (and cut off before the next append), capacity.json is replaced
atomically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stages.capacity.store import SearchStore
from stages.contracts.capacity_files import CapacityResult, ProbeRecord, SearchSettings


def probe(index: int, verdict: str | None = "met") -> ProbeRecord:
    return ProbeRecord(
        index=index,
        rate=10.0 * (index + 1),
        seed=0,
        queries=1000,
        over_slo=index,
        verdict=verdict,
        p99_ms=12.5,
        run_dir=f"probes/p{index:02d}",
        batches=[(100, 0)] * 10,
    )


SETTINGS = SearchSettings(
    search_id="s1", pipeline="p", slo_ms=50, probe_s=10, min_rate=1, **{"with": {"busy": 4.0}}
)


def test_settings_and_probes_round_trip(tmp_path: Path) -> None:
    store = SearchStore(tmp_path / "s1")
    assert not store.exists() and store.read_probes() == []
    store.write_settings(SETTINGS)
    for index in range(3):
        store.append_probe(probe(index))
    assert store.exists()
    assert store.read_settings() == SETTINGS
    assert store.read_probes() == [probe(0), probe(1), probe(2)]
    assert '"with"' in store.settings_path.read_text()  # the contract's name, not with_rates


def test_a_torn_last_line_is_ignored_and_cut_before_the_next_append(tmp_path: Path) -> None:
    store = SearchStore(tmp_path)
    store.append_probe(probe(0))
    store.append_probe(probe(1))
    whole = store.probes_path.read_bytes()
    store.probes_path.write_bytes(whole[: len(whole) - 25])  # killed mid-write of probe 1
    assert store.read_probes() == [probe(0)]
    store.append_probe(probe(1))  # the resumed search records probe 1 again
    assert store.read_probes() == [probe(0), probe(1)]
    assert store.probes_path.read_text().count("\n") == 2


def test_a_corrupt_line_before_the_last_raises(tmp_path: Path) -> None:
    store = SearchStore(tmp_path)
    store.append_probe(probe(0))
    with open(store.probes_path, "a") as handle:
        handle.write('{"index": "broken"}\n')
    store.append_probe(probe(2))
    with pytest.raises(ValueError, match=r"probes.jsonl:2: not a probe record"):
        store.read_probes()


def test_each_probe_is_fsynced_before_append_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spying_fsync(descriptor: int) -> None:
        synced.append(descriptor)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", spying_fsync)
    store = SearchStore(tmp_path)
    store.append_probe(probe(0))
    assert len(synced) >= 1  # the file (and its folder's entry)
    assert store.read_probes() == [probe(0)]


def test_the_result_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SearchStore(tmp_path)
    first = CapacityResult(
        search_id="s1",
        pipeline="p",
        slo_ms=50,
        percentile=0.99,
        certified_qps=10.0,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(10.0, 20.0),
        probes=[probe(0)],
        stop_reason="converged",
        **{"with": {}},
    )
    store.write_result(first)
    assert store.read_result() == first

    def crash(source: object, target: object) -> None:
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed before the rename"):
        store.write_result(first.model_copy(update={"certified_qps": 99.0}))
    assert store.read_result() == first  # the old file, whole
    assert '"certified_qps"' in store.result_path.read_text()

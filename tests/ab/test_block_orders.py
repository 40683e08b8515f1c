"""Balanced AB/BA orders (counts, every look balanced, determinism by seed) and dropping
spoiled blocks with a partner so the kept blocks stay balanced."""

from __future__ import annotations

import random

import pytest

from stages.ab.stats.block_orders import BlockOrder, balanced_orders, drop_with_partner


def test_orders_are_balanced_at_every_even_prefix() -> None:
    orders = balanced_orders(24, seed=3)
    assert len(orders) == 24 and set(orders) == {"AB", "BA"}
    for prefix in range(2, 25, 2):
        assert orders[:prefix].count("AB") == prefix // 2


def test_orders_are_fixed_by_the_seed() -> None:
    assert balanced_orders(24, seed=3) == balanced_orders(24, seed=3)
    assert balanced_orders(24, seed=3) != balanced_orders(24, seed=4)  # 1 in 4096 alike


def test_one_shuffle_of_the_whole_session_keeps_equal_counts() -> None:
    orders = balanced_orders(30, seed=9, balanced_every=30)
    assert orders.count("AB") == orders.count("BA") == 15
    assert orders != balanced_orders(30, seed=9)  # not the pairwise design


def test_an_odd_session_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple"):
        balanced_orders(7, seed=1)


def test_a_spoiled_block_goes_with_its_nearest_partner_of_the_other_order() -> None:
    orders: list[BlockOrder] = ["AB", "BA", "BA", "AB", "AB", "BA"]
    result = drop_with_partner(orders, {3: "segment failed"})
    assert result.dropped == (
        (2, "partner of spoiled block 3 (keeps AB/BA balanced)"),
        (3, "segment failed"),
    )
    assert result.kept == (0, 1, 4, 5)


def test_spoiled_blocks_of_both_orders_balance_each_other() -> None:
    orders: list[BlockOrder] = ["AB", "BA", "BA", "AB"]
    result = drop_with_partner(orders, [0, 1])
    assert result.kept == (2, 3)
    assert result.dropped == ((0, "spoiled"), (1, "spoiled"))


def test_dropping_always_leaves_ab_and_ba_balanced() -> None:
    chooser = random.Random(5)
    for trial in range(200):
        orders = balanced_orders(2 * chooser.randint(1, 12), seed=trial)
        spoiled = set(chooser.sample(range(len(orders)), chooser.randint(0, len(orders))))
        result = drop_with_partner(orders, spoiled)
        kept = [orders[i] for i in result.kept]
        assert kept.count("AB") == kept.count("BA")
        dropped = {index for index, _ in result.dropped}
        assert spoiled <= dropped and dropped.isdisjoint(result.kept)
        assert sorted(dropped | set(result.kept)) == list(range(len(orders)))
        imbalance = abs(sum(1 if orders[i] == "AB" else -1 for i in spoiled))
        assert len(dropped) == len(spoiled) + imbalance  # no block more than balance needs


def test_an_unknown_block_is_refused() -> None:
    with pytest.raises(ValueError, match="not among"):
        drop_with_partner(["AB", "BA"], [2])

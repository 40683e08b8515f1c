"""The order of the two arms in each block, and which blocks to drop when some are spoiled:
AB and BA in equal counts (shuffled with the session's seed), so whatever runs second (warm
caches, heat) falls on both arms alike; a spoiled block is dropped with a block of the other
order, as Pinpoint's pairwise mode does, so the kept blocks stay balanced."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

# re-exported: the session runner and the stats name it here
from stages.contracts.ab_files import BlockOrder as BlockOrder

ORDERS: Final[tuple[BlockOrder, BlockOrder]] = ("AB", "BA")
SPOILED_REASON = "spoiled"


def balanced_orders(blocks: int, seed: int, balanced_every: int = 2) -> list[BlockOrder]:
    """`blocks` orders, AB and BA in equal counts within every run of `balanced_every`
    consecutive blocks, each run shuffled by `seed`: with the default 2, every even prefix is
    balanced, so each planned look sees both orders equally; `balanced_every = blocks` is one
    shuffle of the whole session (Pinpoint's)."""
    if balanced_every < 2 or balanced_every % 2 or blocks % balanced_every:
        raise ValueError(
            f"blocks ({blocks}) must be a multiple of balanced_every ({balanced_every}), "
            "which must be even"
        )
    chooser = random.Random(seed)
    orders: list[BlockOrder] = []
    for _ in range(blocks // balanced_every):
        run: list[BlockOrder] = ["AB", "BA"] * (balanced_every // 2)
        chooser.shuffle(run)
        orders.extend(run)
    return orders


class DroppedBlocks(BaseModel):
    """Which blocks a verdict keeps, and each dropped block with its reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kept: tuple[int, ...] = Field(description="Indices of the kept blocks, ascending.")
    dropped: tuple[tuple[int, str], ...] = Field(
        description="(index, reason) of each dropped block, ascending by index."
    )


def _nearest(candidates: list[int], anchor: int | None) -> int:
    """The candidate nearest `anchor` (the earlier on a tie); the last one without an anchor."""
    if anchor is None:
        return candidates[-1]
    return min(candidates, key=lambda index: (abs(index - anchor), index))


def drop_with_partner(
    orders: Sequence[BlockOrder], spoiled: Mapping[int, str] | Collection[int]
) -> DroppedBlocks:
    """Drops each spoiled block (`spoiled`: indices, or index -> reason) and then, while the
    kept AB and BA counts differ, the kept block of the larger order nearest a spoiled block of
    the other order (the disturbance that spoiled one likely touched its neighbours; the latest
    block when no spoiled block is left to pair). A spoiled AB and a spoiled BA balance each
    other, so as few blocks go as balance allows."""
    reasons = dict(spoiled) if isinstance(spoiled, Mapping) else dict.fromkeys(spoiled, "")
    if unknown := sorted(set(reasons) - set(range(len(orders)))):
        raise ValueError(f"spoiled blocks {unknown} are not among the {len(orders)} blocks")
    dropped = {index: reason or SPOILED_REASON for index, reason in reasons.items()}
    kept = {
        order: [i for i, o in enumerate(orders) if o == order and i not in dropped]
        for order in ORDERS
    }
    by_order = {order: sorted(i for i in reasons if orders[i] == order) for order in ORDERS}
    balanced = min(len(by_order["AB"]), len(by_order["BA"]))
    anchors = {order: by_order[order][balanced:] for order in ORDERS}  # the unbalanced ones
    while len(kept["AB"]) != len(kept["BA"]):
        larger: BlockOrder = "AB" if len(kept["AB"]) > len(kept["BA"]) else "BA"
        other: BlockOrder = "BA" if larger == "AB" else "AB"
        anchor = anchors[other].pop(0) if anchors[other] else None
        partner = _nearest(kept[larger], anchor)
        kept[larger].remove(partner)
        dropped[partner] = (
            f"partner of spoiled block {anchor} (keeps AB/BA balanced)"
            if anchor is not None
            else "keeps AB/BA balanced"
        )
    return DroppedBlocks(
        kept=tuple(sorted(kept["AB"] + kept["BA"])),
        dropped=tuple(sorted(dropped.items())),
    )

"""`Stage[C]`: the config model comes from the type parameter, or from a hand-set
`config_model` (the older spelling third-party stages may still use)."""

from __future__ import annotations

from stages.library.core.builtin import NoopStage, SleepConfig, SleepStage
from stages.library.self_rag.blocks import RouterConfig, RouterStage
from stages.runtime.query import Query
from stages.runtime.stage import Route, Stage, StageConfig, StageContext


class OldStyleStage(Stage):
    config_model = SleepConfig

    def run(self, query: Query) -> Route:
        return None


class OldStyleChild(OldStyleStage):
    pass


def test_config_model_follows_the_type_parameter() -> None:
    assert SleepStage.config_model is SleepConfig
    assert RouterStage.config_model is RouterConfig  # through a generic intermediate base
    assert NoopStage.config_model is StageConfig


def test_hand_set_config_model_still_counts() -> None:
    assert OldStyleStage.config_model is SleepConfig
    assert OldStyleChild.config_model is SleepConfig


def test_the_stage_holds_its_typed_config() -> None:
    stage = SleepStage(SleepConfig(ms=2), StageContext(stage_id="s"))
    assert stage.config.ms == 2

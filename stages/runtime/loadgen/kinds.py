"""The one registry of load generator types: each `loadgen` config model (whose `type` literal
is the name a spec uses) with the scenario that issues its queries and, for open loop, the
arrival process that schedules them. A new type is a config model in `stages.spec.loadgen`'s
union plus one entry here; a test checks that the two list the same models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.runtime.loadgen.arrivals import (
    ArrivalProcess,
    ConstantArrivals,
    PoissonArrivals,
    TraceArrivals,
)
from stages.runtime.loadgen.closed_loop import ClosedLoopScenario
from stages.runtime.loadgen.offline import OfflineScenario
from stages.runtime.loadgen.open_loop import OpenLoopScenario
from stages.runtime.loadgen.scenarios import Scenario
from stages.spec.loadgen import (
    ClosedLoopLoadgen,
    ConstantLoadgen,
    LoadgenBase,
    LoadgenSpec,
    MultiStreamLoadgen,
    OfflineLoadgen,
    ServerLoadgen,
    SingleStreamLoadgen,
    TraceLoadgen,
)


@dataclass(frozen=True)
class LoadgenKind:
    """How one loadgen type is driven."""

    scenario: type[Scenario[Any]]
    arrivals: type[ArrivalProcess[Any]] | None = None
    """Open loop only: when each query is due (the scenario issues this schedule)."""


LOADGEN_KINDS: dict[type[LoadgenBase], LoadgenKind] = {
    ServerLoadgen: LoadgenKind(OpenLoopScenario, PoissonArrivals),
    ConstantLoadgen: LoadgenKind(OpenLoopScenario, ConstantArrivals),
    TraceLoadgen: LoadgenKind(OpenLoopScenario, TraceArrivals),
    ClosedLoopLoadgen: LoadgenKind(ClosedLoopScenario),
    SingleStreamLoadgen: LoadgenKind(ClosedLoopScenario),
    MultiStreamLoadgen: LoadgenKind(ClosedLoopScenario),
    OfflineLoadgen: LoadgenKind(OfflineScenario),
}


def arrival_process(spec: LoadgenSpec) -> ArrivalProcess[Any]:
    """The arrival process of an open-loop spec (KeyError/ValueError for any other type)."""
    arrivals = LOADGEN_KINDS[type(spec)].arrivals
    if arrivals is None:
        raise ValueError(f"loadgen type {spec.type!r} has no arrival schedule (not open loop)")
    return arrivals(spec)


def make_scenario(spec: LoadgenSpec, seed: int) -> Scenario[Any]:
    """The scenario that drives `spec`, seeded (the arrival schedule depends on `seed`)."""
    kind = LOADGEN_KINDS[type(spec)]
    if kind.arrivals is not None:
        return OpenLoopScenario(spec, seed, kind.arrivals(spec))
    return kind.scenario(spec, seed)

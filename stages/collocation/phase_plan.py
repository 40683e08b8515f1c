"""The phase plan: which pipelines run together in which order, trial by trial (solo
baselines, all collocated, the subsets asked for), alternating the order between trials."""

from __future__ import annotations

import itertools

from stages.spec.models import BenchmarkSpec, PipelineSpec

COLLOCATED = "collocated"  # the phase running every pipeline at once


def subset_phase_name(names: list[str]) -> str:
    """The phase of a subset of the pipelines run together: `collocated:a+b`, the names sorted
    and '+'-joined (a pipeline name matches STAGE_ID_PATTERN, so it holds neither ':' nor '+'
    and the name splits back unambiguously)."""
    return f"{COLLOCATED}:{'+'.join(sorted(names))}"


def subsets_of(spec: BenchmarkSpec) -> list[list[PipelineSpec]]:
    """The proper subsets of the pipelines `collocation.subsets` asks to run together, in spec
    order, smallest first: none; pairs (every pair); all (every subset of 2..n-1 pipelines).
    Empty with fewer than three pipelines: the only set of two or more is the full one."""
    pipelines = list(spec.pipelines)
    largest = {"none": 1, "pairs": 2, "all": len(pipelines) - 1}[spec.collocation.subsets]
    return [
        list(subset)
        for size in range(2, min(largest, len(pipelines) - 1) + 1)
        for subset in itertools.combinations(pipelines, size)
    ]


def phases_of(spec: BenchmarkSpec) -> list[tuple[int, str, list[PipelineSpec]]]:
    """(trial, phase, pipelines) in run order, alternating between trials (ABBA): even trials
    run the solo baselines, then all pipelines collocated, then the subset phases
    (`collocation.subsets`, phase `collocated:a+b`); odd trials run that order reversed, so
    slow drift and a noisy neighbour do not land on one side of every comparison."""
    plan: list[tuple[int, str, list[PipelineSpec]]] = []
    for trial in range(spec.repeats):
        if len(spec.pipelines) == 1:
            plan.append((trial, "solo", list(spec.pipelines)))
            continue
        steps: list[tuple[int, str, list[PipelineSpec]]] = []
        if spec.collocation.solo_baselines:
            steps = [(trial, "solo", [pipeline]) for pipeline in spec.pipelines]
        steps.append((trial, COLLOCATED, list(spec.pipelines)))
        steps += [
            (trial, subset_phase_name([p.name for p in subset]), subset)
            for subset in subsets_of(spec)
        ]
        plan += steps if trial % 2 == 0 else steps[::-1]
    return plan

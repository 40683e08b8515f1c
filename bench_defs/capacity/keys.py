"""The partition keys of the `capacity` asset: one dynamic partition per search target.

A key is `<spec>|<target>`: `<spec>` the spec file's stem (as `benchmark_run`'s partitions), and
`<target>` either a pipeline name (a solo search, `capacity_demo|sleeper`) or one ray of a
two-pipeline region, `<A>+<B>@ray<k>of<n>` (`capacity_demo|a+b@ray2of5`, k = 1..n). Pipeline
names cannot hold `|`, `+` or `@` (stages.spec's name pattern), so a key always parses back.
One flat dynamic set (not spec x target multi-partitions): only real searches exist as keys, so
the UI lists no impossible pairs and a backfill over a selection launches exactly those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stages.contracts.errors import InvalidInputError

SPEC_SEPARATOR = "|"
REGION_SEPARATOR = "+"
RAY_PATTERN = re.compile(r"^(?P<a>[^+@|]+)\+(?P<b>[^+@|]+)@ray(?P<ray>\d+)of(?P<rays>\d+)$")
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class CapacityKeyError(InvalidInputError, ValueError):
    """A partition key that is not `<spec>|<pipeline>` or `<spec>|<A>+<B>@ray<k>of<n>`."""


@dataclass(frozen=True)
class CapacityTarget:
    """One `capacity` partition: a solo search of `pipeline`, or ray `ray` of `rays` of the
    region of the pipelines `region` (then `pipeline` is `A+B`, as the ray's capacity.json)."""

    spec: str
    pipeline: str
    region: tuple[str, str] | None = None
    ray: int | None = None
    rays: int | None = None

    @property
    def is_ray(self) -> bool:
        return self.region is not None

    @property
    def target(self) -> str:
        if self.region is None:
            return self.pipeline
        return f"{self.pipeline}@ray{self.ray}of{self.rays}"

    @property
    def key(self) -> str:
        return f"{self.spec}{SPEC_SEPARATOR}{self.target}"

    def solo_keys(self) -> list[str]:
        """The solo partitions a ray needs first (its pipelines' capacities); none for a solo."""
        if self.region is None:
            return []
        return [solo_key(self.spec, name) for name in self.region]


def _check_name(kind: str, name: str, key: str) -> None:
    if not NAME_PATTERN.match(name):
        raise CapacityKeyError(
            f"capacity partition {key!r}: {kind} {name!r} is not a valid name "
            "(letters, digits, _ . -)"
        )


def solo_key(spec: str, pipeline: str) -> str:
    """`<spec>|<pipeline>`: the solo search of one pipeline of a spec."""
    return parse_capacity_key(f"{spec}{SPEC_SEPARATOR}{pipeline}").key


def ray_key(spec: str, a: str, b: str, ray: int, rays: int) -> str:
    """`<spec>|<a>+<b>@ray<ray>of<rays>`: ray `ray` (1..rays) of the region of a and b."""
    return parse_capacity_key(f"{spec}{SPEC_SEPARATOR}{a}+{b}@ray{ray}of{rays}").key


def region_keys(spec: str, a: str, b: str, rays: int) -> list[str]:
    """Every partition of a region: the two solo searches, then the rays 1..rays."""
    return [solo_key(spec, a), solo_key(spec, b)] + [
        ray_key(spec, a, b, ray, rays) for ray in range(1, rays + 1)
    ]


def parse_capacity_key(key: str) -> CapacityTarget:
    """The target a partition key names; CapacityKeyError (one line) when it names none."""
    spec, separator, target = key.partition(SPEC_SEPARATOR)
    if not separator or not spec or not target:
        raise CapacityKeyError(
            f"capacity partition {key!r}: expected <spec>|<pipeline> or <spec>|<A>+<B>@ray<k>of<n>"
        )
    _check_name("spec", spec, key)
    found = RAY_PATTERN.match(target)
    if found is None:
        _check_name("pipeline", target, key)
        return CapacityTarget(spec, target)
    a, b = found["a"], found["b"]
    ray, rays = int(found["ray"]), int(found["rays"])
    _check_name("pipeline", a, key)
    _check_name("pipeline", b, key)
    if a == b:
        raise CapacityKeyError(f"capacity partition {key!r}: a region needs two pipelines")
    if not 1 <= ray <= rays:
        raise CapacityKeyError(f"capacity partition {key!r}: ray must be 1..{rays}")
    return CapacityTarget(spec, f"{a}+{b}", (a, b), ray, rays)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def search_id_of(target: CapacityTarget, root_run_id: str) -> str:
    """A solo search's folder name: the partition (made path-safe) and the first 8 characters
    of the Dagster run id the search started in (the root run of a re-execution, so a
    re-executed run finds its search and resumes it)."""
    return f"{_slug(f'{target.spec}-{target.target}')}-{root_run_id[:8]}"


def region_id_of(target: CapacityTarget, group: str) -> str:
    """The region id a ray passes as `--search-id` (shared by the rays of one region, each
    searching in `<region id>-ray<k>`): spec, pipelines, ray count and `group`, the value
    that ties the rays together (the region request's tag, a backfill id, or the run id)."""
    return _slug(f"{target.spec}-{target.pipeline}-{target.rays}rays-{group}")


def ray_search_id(region_id: str, ray: int) -> str:
    """The ray's search folder under --out (as stages.capacity.region_model.ray_search_id)."""
    return f"{region_id}-ray{ray}"

"""One pipeline in one process: a thread per stage, queries routed along the graph, every
(query, stage, visit) recorded.

`PipelineRuntime` wires the stages (`stages.runtime.wiring`), starts a thread per stage
(`stages.runtime.stage_thread`) and drains and shuts them down. The load generator issues
through its `Admission` (`stages.runtime.admission`); where queries go after a stage and how
they end is `Completion`'s job (`stages.runtime.completion`). `finish` waits for in-flight
queries until the deadline, records the rest as `timeout`, and joins every thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stages.contracts.counters import QueryCounters
from stages.runtime.admission import Admission
from stages.runtime.async_stage import AsyncStage
from stages.runtime.async_thread import AsyncStageThread
from stages.runtime.completion import Completion
from stages.runtime.counters import snapshot
from stages.runtime.fusion import FusedHandOff, chain_head, fused_links
from stages.runtime.graph import StageGraph, StageNode
from stages.runtime.os_threads import named_target
from stages.runtime.query import Query
from stages.runtime.recorder import Recorder, RowBuffer
from stages.runtime.registry import StageRegistry, default_registry
from stages.runtime.stage import StageContext
from stages.runtime.stage_thread import StageThread
from stages.runtime.stage_warnings import StageWarnings
from stages.runtime.wiring import build_nodes, entry_channels
from stages.spec.models import PipelineSpec, StageSpec

THREAD_JOIN_TIMEOUT_S = 5.0  # a stage thread still alive after this at shutdown is leaked
REPLICA_SEED_STRIDE = 1024
"""Seed offset of each further thread's instance of a stage (`concurrency` > 1): distinct from
every other stage's seed in pipelines of fewer than 1024 stages."""


class PipelineRuntime:
    """Builds, runs and tears down one pipeline's stage threads."""

    def __init__(
        self,
        pipeline: PipelineSpec,
        recorder: Recorder,
        *,
        seed: int = 0,
        cache_dir: Path | None = None,
        registry: StageRegistry | None = None,
        on_complete: Callable[[Query], None] | None = None,
        service_urls: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = pipeline
        self.graph = StageGraph.from_pipeline(pipeline)
        self.recorder = recorder
        self._seed = seed
        self._cache_dir = cache_dir
        self._service_urls = dict(service_urls or {})
        self.stop_event = threading.Event()
        self.stop_issuing = threading.Event()
        """Set when the pipeline must stop taking load (error budget spent, shutdown)."""
        self.leaked_threads: list[str] = []
        self.stage_warnings = StageWarnings()
        """What the stages warned about (`StageContext.warn`), for the run's warnings."""
        self.nodes = build_nodes(
            self.graph,
            registry or default_registry(),
            self._stage_context,
            pipeline.loadgen.queue_depth,
        )
        self.stage_count = len(self.nodes)
        self.fused = fused_links(pipeline, self.graph, self._is_async)
        """Fused stage index -> the index of the stage before it (`stages.runtime.fusion`)."""
        self.completion = Completion(
            [node.name for node in self.nodes],
            pipeline.error_budget,
            self.stop_event,
            self.stop_issuing,
        )
        self.completion.on_complete = on_complete
        self.entry_channels = entry_channels(self.nodes, self.graph)
        self.admission = Admission(self.entry_channels, self.completion)
        self.issuer_tally = self.admission.tally
        # The load side is the admission's: bound here, so issuing costs no extra call.
        self.issue = self.admission.issue
        self.register_offline = self.admission.register_offline
        self.unregister_offline = self.admission.unregister_offline
        self.issue_offline = self.admission.issue_offline
        self.record_dropped = self.admission.record_dropped
        self.record_not_issued = self.admission.record_not_issued

    def _is_async(self, stage: StageSpec) -> bool:
        return isinstance(self.nodes[self.graph.index_of[stage.id]].stage, AsyncStage)

    def _stage_context(self, node: StageNode, replica: int = 0) -> StageContext:
        pipeline = self.spec
        context = StageContext(
            stage_id=node.id,
            stage_index=node.index,
            pipeline=pipeline.name,
            device=pipeline.device,
            seed=self._seed * 1_000_003 + node.index + replica * REPLICA_SEED_STRIDE,
            replica=replica,
            outputs=tuple(node.spec.outputs),
            stop_event=self.stop_event,
            write_rows=self.recorder.write_rows,
            service_urls=self._service_urls,
            warn=self.stage_warnings.sink(node.id),
        )
        if self._cache_dir:
            context.cache_dir = self._cache_dir
        return context

    # ----------------------------------------------------------------- state seen from outside

    @property
    def on_complete(self) -> Callable[[Query], None] | None:
        """Called with each finished query's root, in the thread that finished it."""
        return self.completion.on_complete

    @on_complete.setter
    def on_complete(self, callback: Callable[[Query], None] | None) -> None:
        self.completion.on_complete = callback

    @property
    def failure(self) -> str | None:
        """Why the pipeline failed (the error budget ran out), or None."""
        return self.completion.failure

    @property
    def issued(self) -> int:
        return self.admission.issued

    @property
    def first_issue_ns(self) -> int:
        return self.admission.first_issue_ns

    @property
    def counters(self) -> QueryCounters:
        """Totals summed over the threads' tallies (a consistent-enough live snapshot)."""
        admission, completion, recorder = self.admission, self.completion, self.recorder
        with completion.lock:
            tallies = list(completion.tallies)
        return snapshot(
            tallies,
            issued=admission.issued,
            first_issue_ns=admission.first_issue_ns,
            measured=recorder.measured,
            measured_over_slo=recorder.measured_over_slo,
            inflight=len(completion.inflight),
            live_p99_ms=recorder.live_p99_ms,
        )

    def new_query(
        self,
        query_id: int,
        scheduled_ns: int,
        samples: int = 1,
        warmup: bool = False,
        payload: Any = None,
    ) -> Query:
        return Query(query_id, scheduled_ns, samples, payload, warmup, self.stage_count)

    def error_rows(self) -> list[dict[str, Any]]:
        """The `errors` table: one row per distinct stage error."""
        return self.completion.errors.rows()

    # ----------------------------------------------------------------- lifecycle

    def prepare(self) -> None:
        """Load models and data in every stage (before the start barrier)."""
        for node in self.nodes:
            for stage in node.distinct_stages():
                stage.prepare()

    def start(self) -> None:
        """A thread per stage and per further thread of its `concurrency` (`stage:<id>`, then
        `stage:<id>#<n>`); an asynchronous stage's thread runs its event loop. A fused stage
        has no thread of its own: the thread of its chain's first stage runs it."""
        chains = self._fuse()
        for node in self.nodes:
            if node.index in self.fused:
                continue
            for replica, stage in enumerate(node.replicas):
                body: StageThread | AsyncStageThread
                if isinstance(stage, AsyncStage):
                    body = AsyncStageThread(node, stage, self.completion, self.recorder)
                else:
                    body = StageThread(node, self.completion, self.recorder, stage)
                    body.followers = chains.get(node.index, [])
                name = f"stage:{node.name}" + (f"#{replica}" if replica else "")
                target = named_target(name, body.run)
                thread = threading.Thread(target=target, name=name, daemon=True)
                node.threads.append(thread)
                thread.start()

    def _fuse(self) -> dict[int, list[StageThread]]:
        """Wire the fused links (`stages.runtime.fusion`): the output that fed each fused stage
        now serves it in the sending thread, and its body is built without a thread of its own.
        Returns each chain's first stage index -> the bodies fused into its thread."""
        hand_offs: dict[int, FusedHandOff] = {}
        for index, before in self.fused.items():
            hand_offs[index] = hand_off = FusedHandOff()
            output = (self.nodes[index].name, hand_off, False)
            self.nodes[before].outputs[0] = output
            self.nodes[before].output_by_name[output[0]] = output
        chains: dict[int, list[StageThread]] = {}
        # Bodies only now: a body reads its outputs when built, and every link is rewired.
        for index, hand_off in hand_offs.items():
            node = self.nodes[index]
            body = StageThread(node, self.completion, self.recorder, node.stage)
            hand_off.attach(body)
            chains.setdefault(chain_head(self.fused, index), []).append(body)
        return chains

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no query is in flight; False if `timeout_s` passed first."""
        return self.completion.idle.wait(max(0.0, timeout_s))

    def finish(self, drain_deadline_ns: int, buffer: RowBuffer) -> bool:
        """Drain until the deadline, record what is left as `timeout`, stop and join every
        stage thread, close the stages. Returns True if everything drained in time."""
        drained = self.wait_idle((drain_deadline_ns - time.monotonic_ns()) / 1e9)
        if not drained:
            self.issuer_tally.timeouts += self.completion.time_out_inflight(buffer)
        self.stop_issuing.set()
        self.stop_event.set()  # releases stages waiting on it (sleep-like or hung by design)
        self._stop_threads()
        self._close_stages()
        buffer.flush()
        self.recorder.write_errors_table(self.error_rows())
        return drained

    def _stop_threads(self) -> None:
        """STOP behind every inbox's queue, one per thread taking from it, then join each
        thread (a hung one is leaked)."""
        for node in self.nodes:
            for _ in node.threads:
                node.inbox.stop()
        for node in self.nodes:
            for thread in node.threads:
                thread.join(timeout=THREAD_JOIN_TIMEOUT_S)
                if thread.is_alive():
                    self.leaked_threads.append(thread.name.removeprefix("stage:"))

    def _close_stages(self) -> None:
        for node in self.nodes:
            for stage in node.distinct_stages():
                try:
                    stage.close()
                except Exception as error:
                    text = f"close: {type(error).__name__}: {error}"
                    self.completion.errors.note(node.index, -1, text)

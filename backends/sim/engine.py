"""The simulated engine: runs the scheduler's steps in (injected) time and hands out tokens.

One asyncio task per worker runs the step loop, as vLLM's EngineCore busy loop does:

1. wait until there is work (and the worker is not *stuck*, a fault that keeps ``/health`` at 200
   while nothing is generated);
2. plan a step (:class:`~backends.sim.scheduler.Scheduler`), price it with the preset's
   :class:`~backends.sim.latency.LatencyModel` and sleep until the step's end. Steps are placed
   back to back on a deadline (``end = max(previous end, now) + step``), so event-loop overhead
   does not add up over thousands of steps;
3. apply it: computed tokens advance, each sampled token is published on its request's
   :class:`GenerationHandle`, finished requests release their KV blocks, and the vLLM metrics
   (TTFT, ITL, E2E, queue time, token counters) are recorded at the clock's time.

Consumers (HTTP handlers) await :meth:`GenerationHandle.wait` and read every token published since
their last read, so a handler wakes at most once per step however many tokens arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.sim.clock import Clock
from backends.sim.prometheus import GaugeSnapshot, WorkerMetrics
from backends.sim.output import OutputPlan, OutputPolicy
from backends.sim.prefix_cache import PrefixCache, block_hashes
from backends.sim.presets import EnginePreset
from backends.sim.scheduler import Scheduler, SimRequest, StepPlan


class PromptTooLong(ValueError):
    """The prompt plus requested output does not fit the model length or the KV pool."""


@dataclass(eq=False)
class GenerationHandle:
    """One request's output as the engine produces it."""

    request: SimRequest
    output: OutputPlan
    arrival: float
    emitted: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    _waiter: asyncio.Future[None] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def prompt_tokens(self) -> int:
        return self.request.prompt_len

    @property
    def cached_tokens(self) -> int:
        return self.request.cached_tokens

    async def wait(self, seen: int) -> int:
        """Wait until more than ``seen`` tokens are out or the request ended; returns the count."""
        while self.emitted <= seen and not self.done:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.emitted

    def notify(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class SimEngine:
    """A simulated vLLM engine for one served model (see module docstring)."""

    def __init__(
        self, preset: EnginePreset, clock: Clock, output: OutputPolicy, metrics: WorkerMetrics
    ) -> None:
        self.preset = preset
        self.clock = clock
        self.output = output
        self.metrics = metrics
        self.cache = PrefixCache(preset.num_blocks, preset.block_size)
        self.scheduler = Scheduler(self.cache, preset.max_num_seqs, preset.max_num_batched_tokens)
        self._handles: dict[SimRequest, GenerationHandle] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stuck = False
        self._next_id = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for handle in list(self._handles.values()):
            self.abort(handle)

    @property
    def stuck(self) -> bool:
        return self._stuck

    @stuck.setter
    def stuck(self, value: bool) -> None:
        self._stuck = value
        self._wake.set()

    # -- requests -------------------------------------------------------------------------
    async def submit(
        self, prompt: Sequence[int], max_tokens: int | None, cache_salt: str | None = None
    ) -> GenerationHandle:
        """Admit a prompt after the API server's admission cost; raises :class:`PromptTooLong`."""
        arrival = self.clock.now()
        room = self.preset.max_model_len - len(prompt)
        if room <= 0 or (max_tokens is not None and max_tokens > room):
            raise PromptTooLong(
                f"This model's maximum context length is {self.preset.max_model_len} tokens. "
                f"However, you requested {len(prompt) + (max_tokens or 0)} tokens "
                f"({len(prompt)} in the messages, {max_tokens or 0} in the completion)."
            )
        plan = self.output.plan(hash(tuple(prompt)), max_tokens, room)
        if not self.scheduler.fits(len(prompt), plan.num_tokens):
            raise PromptTooLong(f"prompt of {len(prompt)} tokens does not fit the KV cache")
        if self.preset.latency.admission_s > 0:
            await self.clock.sleep(self.preset.latency.admission_s)
        self._next_id += 1
        request = SimRequest(
            request_id=str(self._next_id),
            prompt_len=len(prompt),
            block_hashes=block_hashes(prompt, self.preset.block_size, cache_salt),
            max_output_tokens=plan.num_tokens,
        )
        handle = GenerationHandle(request, plan, arrival)
        self._handles[request] = handle
        self.scheduler.add(request)
        self._wake.set()
        return handle

    def abort(self, handle: GenerationHandle) -> None:
        """Stop a request (client gone): its blocks are released, it counts as ``abort``."""
        if handle.done:
            return
        self.scheduler.abort(handle.request)
        self._finish(handle, "abort")

    def gauges(self) -> GaugeSnapshot:
        stats = self.scheduler.stats
        return GaugeSnapshot(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_usage=self.cache.usage,
            prefix_queries=stats.queries,
            prefix_hits=stats.hits,
            preemptions=stats.preemptions,
        )

    # -- the step loop --------------------------------------------------------------------
    async def _run(self) -> None:
        next_start = self.clock.now()
        while True:
            if self._stuck or not self.scheduler.has_work:
                self._wake.clear()
                await self._wake.wait()
                continue
            plan = self.scheduler.schedule()
            if not plan.items:
                self._wake.clear()
                await self._wake.wait()
                continue
            duration = self.preset.latency.step_seconds(
                plan.prefill_tokens, plan.decode_seqs, plan.attention_pairs)
            start = max(next_start, self.clock.now())
            next_start = start + duration
            self._mark_scheduled(plan, start)
            await self.clock.sleep(next_start - self.clock.now())
            self._apply(plan)

    def _mark_scheduled(self, plan: StepPlan, start: float) -> None:
        for item in plan.items:
            handle = self._handles.get(item.request)
            if handle is not None and handle.scheduled_at is None:
                handle.scheduled_at = start
                self.metrics.queue.observe(start - handle.arrival)

    def _apply(self, plan: StepPlan) -> None:
        now = self.clock.now()
        result = self.scheduler.complete(plan)
        self.metrics.iteration_tokens.observe(sum(item.tokens for item in plan.items))
        for request in result.sampled:
            handle = self._handles.get(request)
            if handle is None:
                continue
            self._publish(handle, now)
        for request in result.finished:
            handle = self._handles.get(request)
            if handle is not None:
                self._finish(handle, handle.output.finish_reason)

    def _publish(self, handle: GenerationHandle, now: float) -> None:
        metrics = self.metrics
        if handle.first_token_at is None:
            handle.first_token_at = now
            metrics.ttft.observe(now - handle.arrival)
            metrics.prompt_tokens += handle.prompt_tokens
            metrics.prompt_tokens_cached += handle.cached_tokens
        else:
            metrics.itl.observe(now - (handle.last_token_at or now))
        handle.last_token_at = now
        handle.emitted += 1
        metrics.generation_tokens += 1
        handle.notify()

    def _finish(self, handle: GenerationHandle, reason: str) -> None:
        handle.finish_reason = reason
        self._handles.pop(handle.request, None)
        self.metrics.e2e.observe(self.clock.now() - handle.arrival)
        self.metrics.record_finished(reason, handle.prompt_tokens, handle.emitted)
        handle.notify()

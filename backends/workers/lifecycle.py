"""Pure worker lifecycle: a state machine from events to a new state and the actions to take.

``step(state, event, now, policy) -> (state, actions)`` never does I/O and never reads a clock:
``now`` (seconds, monotonic) is given, so tests drive it through tables of events.
``backends.workers.supervisor`` runs it: it turns actions into process operations and the outcomes of
those operations back into events.

Phases::

    planned --Start--> launching --Spawned--> warming --Healthy--> ready
    ready --Drain--> draining --Drained--> stopping --Exited--> stopped      (goal "stop")
                                                    \\-Exited--> launching  (goal "restart")
    launching/warming/ready --SpawnFailed/Exited--> failed (retry_at = now + backoff)
    warming --HealthTimeout--> stopping (goal "run") --Exited--> failed
    failed --RetryDue--> launching                         (crash loop: retry_at None, given up)

Restart policy (:class:`RestartPolicy`): after the n-th crash within ``crash_window_s`` the
worker waits ``min(backoff_initial_s * backoff_factor ** (n - 1), backoff_max_s)`` before it is
relaunched (1, 2, 4 ... 60 s by default); more than ``crash_loop_limit`` crashes within the window
is a crash loop: the worker stays ``failed`` with ``retry_at=None`` until a Start or a restart.
A crash is any exit that nobody asked for, a spawn failure, or a health timeout. Requested
restarts and stops are not crashes.

Every launch increments ``generation``; events carry the generation they belong to and stale
ones (a health probe of a previous process) are ignored. Unknown (phase, event) pairs leave the
state unchanged with no action.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Literal

Goal = Literal["run", "stop", "restart"]


class Phase(enum.Enum):
    PLANNED = "planned"
    LAUNCHING = "launching"
    WARMING = "warming"
    READY = "ready"
    DRAINING = "draining"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Action(enum.Enum):
    SPAWN = "spawn"  # start a new process (generation = state.generation), watch health and exit
    KILL = "kill"  # SIGTERM the process group, SIGKILL after a timeout
    DRAIN = "drain"  # stop routing to it, wait (bounded) for in-flight requests, then Drained
    SCHEDULE_RETRY = "schedule_retry"  # RetryDue at state.retry_at


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Backoff and crash-loop limits (seconds)."""

    backoff_initial_s: float = 1.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 60.0
    crash_loop_limit: int = 5
    crash_window_s: float = 300.0

    def backoff_s(self, crashes: int) -> float:
        """Delay before relaunching after the ``crashes``-th recent crash (>= 1)."""
        return min(self.backoff_initial_s * self.backoff_factor ** max(crashes - 1, 0), self.backoff_max_s)


@dataclass(frozen=True, slots=True)
class WorkerState:
    """Where one worker is in its lifecycle."""

    phase: Phase = Phase.PLANNED
    since: float = 0.0
    goal: Goal = "run"
    generation: int = 0
    restarts: int = 0
    crashes: tuple[float, ...] = ()
    retry_at: float | None = None
    last_exit_code: int | None = None
    last_error: str | None = None

    @property
    def gave_up(self) -> bool:
        """Failed in a crash loop: no retry is scheduled."""
        return self.phase is Phase.FAILED and self.retry_at is None


# Events -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Start:
    """Run the worker (from planned, stopped, or failed; resets the crash history)."""


@dataclass(frozen=True, slots=True)
class Drain:
    """Stop taking requests, let in-flight ones finish, stop; then stop or relaunch."""

    then: Literal["stop", "restart"] = "stop"


@dataclass(frozen=True, slots=True)
class Spawned:
    generation: int


@dataclass(frozen=True, slots=True)
class SpawnFailed:
    generation: int
    error: str


@dataclass(frozen=True, slots=True)
class Healthy:
    generation: int


@dataclass(frozen=True, slots=True)
class HealthTimeout:
    generation: int
    error: str


@dataclass(frozen=True, slots=True)
class Exited:
    generation: int
    code: int | None
    cause: str | None = None
    """The root cause its log names (``backends.workers.log_cause``), when it has one."""


@dataclass(frozen=True, slots=True)
class Drained:
    generation: int


@dataclass(frozen=True, slots=True)
class RetryDue:
    """The backoff timer fired (acted on only once ``now >= retry_at``)."""


Event = Start | Drain | Spawned | SpawnFailed | Healthy | HealthTimeout | Exited | Drained | RetryDue
Step = tuple[WorkerState, tuple[Action, ...]]

_RUNNING = (Phase.LAUNCHING, Phase.WARMING, Phase.READY)
_AT_REST = (Phase.PLANNED, Phase.STOPPED, Phase.FAILED)


def _move(state: WorkerState, phase: Phase, now: float, **changes: object) -> WorkerState:
    return dataclasses.replace(state, phase=phase, since=now, **changes)  # type: ignore[arg-type]


def _launch(state: WorkerState, now: float, *, restart: bool, fresh: bool = False) -> Step:
    state = _move(state, Phase.LAUNCHING, now, goal="run", generation=state.generation + 1,
                  restarts=state.restarts + (1 if restart else 0), retry_at=None,
                  crashes=() if fresh else state.crashes)
    return state, (Action.SPAWN,)


def _crash(state: WorkerState, now: float, policy: RestartPolicy, error: str, code: int | None = None) -> Step:
    recent = tuple(t for t in state.crashes if now - t < policy.crash_window_s) + (now,)
    if len(recent) > policy.crash_loop_limit:
        error = (f"crash loop: {len(recent)} crashes within {policy.crash_window_s:g} s; not restarting "
                 f"(last: {error})")
        return _move(state, Phase.FAILED, now, crashes=recent, retry_at=None, last_error=error,
                     last_exit_code=code), ()
    retry_at = now + policy.backoff_s(len(recent))
    return _move(state, Phase.FAILED, now, crashes=recent, retry_at=retry_at, last_error=error,
                 last_exit_code=code), (Action.SCHEDULE_RETRY,)


def _exited(state: WorkerState, event: Exited, now: float, policy: RestartPolicy) -> Step:
    if state.phase in (Phase.STOPPING, Phase.DRAINING) and state.goal != "run":
        if state.goal == "restart":
            return _launch(dataclasses.replace(state, last_exit_code=event.code), now, restart=True)
        return _move(state, Phase.STOPPED, now, goal="run", last_exit_code=event.code), ()
    if state.phase is Phase.STOPPING and state.last_error:  # killed after a health timeout
        return _crash(state, now, policy, state.last_error, event.code)
    if state.phase in (*_RUNNING, Phase.STOPPING):
        cause = f": {event.cause}" if event.cause else ""
        return _crash(state, now, policy, f"exited unexpectedly with code {event.code}{cause}", event.code)
    return state, ()


def _drain(state: WorkerState, event: Drain, now: float) -> Step:
    if state.phase is Phase.READY:
        return _move(state, Phase.DRAINING, now, goal=event.then), (Action.DRAIN,)
    if state.phase in (Phase.LAUNCHING, Phase.WARMING):
        return _move(state, Phase.STOPPING, now, goal=event.then), (Action.KILL,)
    if state.phase in (Phase.DRAINING, Phase.STOPPING):
        return dataclasses.replace(state, goal=event.then), ()
    if event.then == "restart":
        return _launch(state, now, restart=state.generation > 0, fresh=True)
    if state.phase is Phase.FAILED:
        return _move(state, Phase.STOPPED, now, retry_at=None), ()
    return state, ()


# One `case` per transition of the table in the module docstring: splitting it would hide the table.
def step(state: WorkerState, event: Event, now: float, policy: RestartPolicy = RestartPolicy()) -> Step:  # noqa: C901
    """The next state and the actions to perform, for ``event`` at time ``now``."""
    generation = getattr(event, "generation", state.generation)
    if generation != state.generation:
        return state, ()  # about a previous process
    match event:
        case Start() if state.phase in _AT_REST:
            return _launch(state, now, restart=state.generation > 0, fresh=True)
        case Drain():
            return _drain(state, event, now)
        case Spawned() if state.phase is Phase.LAUNCHING:
            return _move(state, Phase.WARMING, now), ()
        case SpawnFailed() if state.phase is Phase.LAUNCHING:
            return _crash(state, now, policy, f"could not start: {event.error}")
        case SpawnFailed() if state.phase is Phase.STOPPING:
            return _exited(state, Exited(event.generation, None), now, policy)
        case Healthy() if state.phase is Phase.WARMING:
            return _move(state, Phase.READY, now, last_error=None), ()
        case HealthTimeout() if state.phase is Phase.WARMING:
            return _move(state, Phase.STOPPING, now, last_error=event.error), (Action.KILL,)
        case Exited():
            return _exited(state, event, now, policy)
        case Drained() if state.phase is Phase.DRAINING:
            return _move(state, Phase.STOPPING, now), (Action.KILL,)
        case RetryDue() if state.phase is Phase.FAILED and state.retry_at is not None:
            if now >= state.retry_at:
                return _launch(state, now, restart=True)
            return state, (Action.SCHEDULE_RETRY,)
    return state, ()

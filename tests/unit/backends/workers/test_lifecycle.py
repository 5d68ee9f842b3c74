"""Table-driven tests of the pure worker lifecycle (backends.workers.lifecycle), with explicit times."""

from __future__ import annotations

import dataclasses

import pytest

from backends.workers.lifecycle import (
    Action, Drain, Drained, Event, Exited, Healthy, HealthTimeout, Phase, RestartPolicy, RetryDue, Spawned,
    SpawnFailed, Start, WorkerState, step,
)

P = Phase
A = Action
POLICY = RestartPolicy(backoff_initial_s=1.0, backoff_factor=2.0, backoff_max_s=10.0, crash_loop_limit=3,
                       crash_window_s=100.0)


def run(events: list[tuple[float, Event]], state: WorkerState | None = None) -> list[tuple[WorkerState, tuple[Action, ...]]]:
    state = state or WorkerState()
    trace = []
    for now, event in events:
        state, actions = step(state, event, now, POLICY)
        trace.append((state, actions))
    return trace


# (id, events, expected (phase, actions) after each event)
SCRIPTS = [
    ("start-to-ready",
     [(0, Start()), (1, Spawned(1)), (30, Healthy(1))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ())]),
    ("drain-then-stop",
     [(0, Start()), (1, Spawned(1)), (2, Healthy(1)), (5, Drain("stop")), (6, Drained(1)), (8, Exited(1, 0))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ()), (P.DRAINING, (A.DRAIN,)),
      (P.STOPPING, (A.KILL,)), (P.STOPPED, ())]),
    ("drain-then-restart",
     [(0, Start()), (1, Spawned(1)), (2, Healthy(1)), (5, Drain("restart")), (6, Drained(1)), (8, Exited(1, 0)),
      (9, Spawned(2)), (20, Healthy(2))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ()), (P.DRAINING, (A.DRAIN,)),
      (P.STOPPING, (A.KILL,)), (P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ())]),
    ("crash-when-ready-backs-off",
     [(0, Start()), (1, Spawned(1)), (2, Healthy(1)), (50, Exited(1, -9)), (51, RetryDue()), (51, Spawned(2))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ()), (P.FAILED, (A.SCHEDULE_RETRY,)),
      (P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ())]),
    ("early-retry-timer-reschedules",
     [(0, Start()), (1, SpawnFailed(1, "no python")), (1.5, RetryDue()), (2, RetryDue())],
     [(P.LAUNCHING, (A.SPAWN,)), (P.FAILED, (A.SCHEDULE_RETRY,)), (P.FAILED, (A.SCHEDULE_RETRY,)),
      (P.LAUNCHING, (A.SPAWN,))]),
    ("health-timeout-kills-then-fails",
     [(0, Start()), (1, Spawned(1)), (300, HealthTimeout(1, "not healthy after 300 s")), (302, Exited(1, -15))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.STOPPING, (A.KILL,)), (P.FAILED, (A.SCHEDULE_RETRY,))]),
    ("stop-while-warming-kills-without-drain",
     [(0, Start()), (1, Spawned(1)), (2, Drain("stop")), (3, Exited(1, -15))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.STOPPING, (A.KILL,)), (P.STOPPED, ())]),
    ("exit-while-draining-to-stop-is-no-crash",
     [(0, Start()), (1, Spawned(1)), (2, Healthy(1)), (3, Drain("stop")), (4, Exited(1, 1))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.READY, ()), (P.DRAINING, (A.DRAIN,)), (P.STOPPED, ())]),
    ("stale-generation-ignored",
     [(0, Start()), (1, Spawned(1)), (2, Exited(1, 1)), (3, RetryDue()), (4, Healthy(1)), (5, Exited(1, 0))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.FAILED, (A.SCHEDULE_RETRY,)), (P.LAUNCHING, (A.SPAWN,)),
      (P.LAUNCHING, ()), (P.LAUNCHING, ())]),
    ("stop-cancels-a-scheduled-retry",
     [(0, Start()), (1, SpawnFailed(1, "x")), (1.2, Drain("stop")), (2, RetryDue())],
     [(P.LAUNCHING, (A.SPAWN,)), (P.FAILED, (A.SCHEDULE_RETRY,)), (P.STOPPED, ()), (P.STOPPED, ())]),
    ("restart-from-stopped-launches",
     [(0, Start()), (1, Spawned(1)), (2, Drain("stop")), (3, Exited(1, 0)), (4, Drain("restart"))],
     [(P.LAUNCHING, (A.SPAWN,)), (P.WARMING, ()), (P.STOPPING, (A.KILL,)), (P.STOPPED, ()),
      (P.LAUNCHING, (A.SPAWN,))]),
    ("ignored-pairs",
     [(0, Drain("stop")), (1, Healthy(0)), (2, Drained(0)), (3, RetryDue()), (4, Exited(0, 0))],
     [(P.PLANNED, ()), (P.PLANNED, ()), (P.PLANNED, ()), (P.PLANNED, ()), (P.PLANNED, ())]),
]


@pytest.mark.parametrize(("events", "expected"), [s[1:] for s in SCRIPTS], ids=[s[0] for s in SCRIPTS])
def test_lifecycle_scripts(events: list[tuple[float, Event]], expected: list[tuple[Phase, tuple[Action, ...]]]) -> None:
    assert [(s.phase, a) for s, a in run(events)] == expected


@pytest.mark.parametrize(("crashes", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)])
def test_backoff_doubles_up_to_the_cap(crashes: int, delay: float) -> None:
    assert POLICY.backoff_s(crashes) == delay


def crash_cycle(state: WorkerState, now: float) -> WorkerState:
    """Launch (if failed), spawn and crash the worker at ``now``."""
    if state.phase is Phase.FAILED:
        state, _ = step(state, RetryDue(), now, POLICY)
    state, _ = step(state, Spawned(state.generation), now, POLICY)
    state, _ = step(state, Exited(state.generation, 1), now, POLICY)
    return state


def test_crash_loop_gives_up_after_the_limit_and_start_resets_it() -> None:
    state, _ = step(WorkerState(), Start(), 0.0, POLICY)
    retry_delays = []
    for now in (0.0, 2.0, 5.0):
        state = crash_cycle(state, now)
        retry_delays.append(state.retry_at - now)
    assert retry_delays == [1.0, 2.0, 4.0]
    state = crash_cycle(state, 10.0)  # 4 crashes within 100 s > limit 3
    assert state.phase is Phase.FAILED and state.gave_up and state.retry_at is None
    assert state.last_error.startswith("crash loop: 4 crashes within 100 s")
    assert step(state, RetryDue(), 1000.0, POLICY) == (state, ())
    state, actions = step(state, Start(), 1000.0, POLICY)
    assert (state.phase, actions, state.crashes) == (Phase.LAUNCHING, (Action.SPAWN,), ())


def test_crashes_outside_the_window_are_forgotten() -> None:
    state, _ = step(WorkerState(), Start(), 0.0, POLICY)
    for now in (0.0, 200.0, 400.0, 600.0, 800.0):
        state = crash_cycle(state, now)
        assert state.retry_at == now + 1.0  # always the first crash of its window
    assert len(state.crashes) == 1


def test_restarts_count_relaunches_and_generation_every_launch() -> None:
    trace = run([(0, Start()), (1, Spawned(1)), (2, Healthy(1)), (3, Drain("restart")), (4, Drained(1)),
                 (5, Exited(1, 0)), (6, Spawned(2)), (7, Exited(2, -9)), (8, RetryDue())])
    final = trace[-1][0]
    assert (final.phase, final.generation, final.restarts, final.last_exit_code) == (Phase.LAUNCHING, 3, 2, -9)


def test_health_timeout_message_is_kept_as_the_failure_reason() -> None:
    trace = run([(0, Start()), (1, Spawned(1)), (2, HealthTimeout(1, "not healthy after 1 s")), (3, Exited(1, -15))])
    assert trace[-1][0].last_error == "not healthy after 1 s"


def test_states_are_immutable_values() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        WorkerState().phase = Phase.READY  # type: ignore[misc]

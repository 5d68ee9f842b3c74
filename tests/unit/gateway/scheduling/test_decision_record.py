"""What the per-request record keeps of a scheduling decision, and how it renders.

A recorded decision must explain the request the same way ``decision.explain()`` (the dry-run
route) would, hold no prompt, and never score after the fact: a single routable endpoint is
chosen without scoring and the record says so.
"""

from __future__ import annotations

import gc
import types

from gateway.config import ProfileSettings
from tests.unit.gateway.scheduling.support import chat, endpoint
from tests.unit.gateway.scheduling.test_profile import LONG, build, route


async def test_a_recorded_decision_renders_as_explain_does() -> None:
    scheduler, *_ = build(ProfileSettings(filters=[]))
    group = [endpoint(f"e{i}") for i in range(3)]
    await route(scheduler, group, LONG)  # the prompt is now indexed on one endpoint
    decision = await route(scheduler, group, LONG)
    expected = decision.explain()
    rendered = decision.record().render()
    assert rendered.pop("scored") is True
    assert rendered == expected
    chosen = rendered["endpoints"][0]
    assert chosen["matched_blocks"] > 0 and chosen["predicted_cached_tokens"] == decision.predicted_cached > 0


async def test_a_single_routable_endpoint_is_recorded_unscored() -> None:
    scheduler, *_ = build()
    group = [endpoint("only"), endpoint("gone")]
    group[1].draining = True
    decision = await route(scheduler, group, "hello")
    rendered = decision.record().render()
    assert rendered["scored"] is False and rendered["ranked"] == ["only"]
    assert rendered["endpoints"][0]["scores"] == {} and rendered["endpoints"][0]["total"] is None
    assert decision.breakdown.computed() is None  # recording computed nothing


# code and running frames reach the test's own locals (the request) through globals and the loop
_NOT_FOLLOWED = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                 types.FrameType, types.CoroutineType, types.GeneratorType, types.CellType)


def _reachable(roots: list[object], limit: int = 200_000) -> list[object]:
    """Every data object reachable from ``roots`` through references (code, frames and modules not followed)."""
    seen: dict[int, object] = {}
    stack = list(roots)
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _NOT_FOLLOWED):
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return list(seen.values())


async def test_the_record_holds_no_reference_to_the_request() -> None:
    scheduler, *_ = build()
    group = [endpoint("a"), endpoint("b")]
    request = chat(LONG)
    decision = await scheduler.schedule(group, request)
    decision.commit(decision.ranked[0])
    record = decision.record()
    reachable = _reachable([getattr(record, name) for name in record.__slots__])
    assert not any(obj is request for obj in reachable)
    assert not any(obj is decision.key.blocks for obj in reachable)  # nor the prompt's hashes

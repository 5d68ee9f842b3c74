"""``POST /admin/routing/explain``: how kvgate would schedule a request, without sending it.

The body is an OpenAI request (chat if it has ``messages``, else a completion). The endpoint
selects the route as a real request would (``selection/selector.py``; under ``route_selection``:
signals, limits from this call's ``X-Max-*`` headers over the default key limits, each cluster's
predicted TTFT, load, fit and estimated cost, and the reason), runs the primary cluster's
scheduler exactly as a real request would (producers, filters, scorers, picker) and returns
the decision: the ranked endpoints and, per endpoint, every scorer's score, the weighted total, whether a filter dropped it, its matched
prefix blocks and predicted cached tokens, in-flight count and engine stats, and (``admission``,
null when ``[admission]`` is off) the admission decision it would get now: admit, queue, spill
or shed, with the saturation it was judged on. Nothing is committed: no upstream is called, the
prefix index is not written, nothing is queued. Guarded by the admin key.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request

from gateway.api.admin import require_admin
from gateway.errors import InvalidRequestError, NoHealthyEndpointError
from gateway.keys.table import ANONYMOUS
from gateway.protocol.openai import Operation, parse_request

router = APIRouter(prefix="/admin/routing", tags=["admin"], dependencies=[Depends(require_admin)])


@router.post("/explain", summary="Explain the scheduling decision for a request body (nothing is sent)")
async def explain(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        peek = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequestError("The body must be an OpenAI chat or completion request (JSON).") from None
    operation = Operation.CHAT if isinstance(peek, dict) and "messages" in peek else Operation.COMPLETION
    inference = parse_request(operation, raw)
    container = request.app.state.container
    routed = await container.selector.select(inference, ANONYMOUS, request.headers)
    selection = container.selector.explain(routed)
    endpoints = container.registry.cluster(routed.cluster)
    if not endpoints:
        raise NoHealthyEndpointError(f"Cluster '{routed.cluster}' has no endpoints.")
    decision = await request.app.state.routing.scheduler.schedule(endpoints, routed.request)
    admission = _admission(container, inference, routed, request.headers)
    explain_fn = getattr(decision, "explain", None)
    if explain_fn is not None:
        return {"model": inference.model, **explain_fn(), "route_selection": selection, "admission": admission}
    return {
        "model": inference.model,
        "route_selection": selection,
        "cluster": routed.cluster,
        "policy": container.settings.routing.policy,
        "ranked": [endpoint.spec.name for endpoint in decision.ranked],
        "endpoints": [{"name": e.spec.name, "scores": decision.breakdown.get(e.spec.name, {})} for e in decision.ranked],
        "admission": admission,
    }


def _admission(container: Any, inference: Any, routed: Any, headers: Any) -> dict[str, Any] | None:
    """The admission decision a request would get now (``gate.judge``: nothing queued, counted or
    woken); None when ``[admission]`` is off. ``X-Failover-Route`` and ``X-Priority`` are read as a
    request's; the key is this call's (anonymous)."""
    proxy = container.proxy
    gate = proxy.admission if proxy is not None else None
    if gate is None:
        return None
    route = proxy.route_for(inference, headers.get("x-failover-route"), routed.route)
    return gate.judge(proxy.admission_ask(route, ANONYMOUS.name, headers, routed)).render()

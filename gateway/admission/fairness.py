"""Fair shares of a busy cluster's slots across keys: who overflows first when it is saturated (pure).

The gateway knows what each key holds on a cluster: its admitted requests still in flight (the
gate's leases) plus its waiters in the admission queue. That is the key's **demand** ``d_k``.
The cluster's **capacity** ``C`` is its slots (``slots_per_endpoint * weight`` summed over its
routable endpoints). A key's fair share is its **weighted max-min share** (water-filling; D.
Bertsekas, R. Gallager, "Data Networks", 2nd ed., 1992, section 6.5.2): every key gets
``min(d_k, w_k * u)`` with the unit ``u`` the largest that fits ``C``; a key asking less than its
weight's part leaves the rest to the others. So:

* the shares sum to ``min(C, sum(d))``, no key's share is over its demand, and a key held below
  its demand has the largest share per weight (no key below its demand could gain without one
  with a smaller share per weight losing);
* a request **is over share** when its key would hold more than its share with it
  (``d_k + 1 > share_k``, the new request counted in ``d_k``). When the cluster is saturated,
  such requests spill first (``decision.py``); requests of keys under their share queue even
  then (spilling only at their latest spill time), and start-time fair queueing serves them
  first. A quiet key against a 5x
  neighbour so keeps its share of the local cluster, and the neighbour's excess overflows.
  With no other key holding anything on the cluster nobody is over share (there is no one to
  be fair to: a lone key queues as before).

Weights are relative (> 0, 1 when a key is not listed); demands and capacity are requests.
"""

from __future__ import annotations

from collections.abc import Mapping


def fair_shares(demand: Mapping[str, float], weight: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Weighted max-min shares of ``capacity`` for the keys of ``demand`` (keys without demand get 0).

    One pass over the keys in order of demand per weight (O(k log k) for k keys; the rounds of
    textbook water-filling cap at least one key each, O(k^2) when their demands are spread): a key
    whose demand fits the unit of the keys still uncapped is capped at its demand (the unit can
    only grow: it gave back more than its part), and the first key that does not fit takes, with
    every key after it, its weight's part of what is left.
    """
    shares = {key: 0.0 for key in demand}
    active = sorted(
        (float(asked) / weight.get(key, 1.0), key, float(asked), weight.get(key, 1.0))
        for key, asked in demand.items() if asked > 0.0
    )
    left = max(0.0, capacity)
    total_weight = sum(item[3] for item in active)
    for index, (_, key, asked, part) in enumerate(active):
        if left <= 1e-12:
            break
        unit = left / total_weight
        if asked > unit * part + 1e-12:
            for _, rest, _, rest_part in active[index:]:
                shares[rest] = unit * rest_part
            break
        shares[key] = asked
        left -= asked
        total_weight -= part
    return shares


def share_state(
    key: str, demand: Mapping[str, float], weight: Mapping[str, float], capacity: float
) -> str | None:
    """``"over"`` (:func:`over_share`), ``"under"``, or None when no other key holds anything (no one to be fair to)."""
    if not any(asked > 0.0 for other, asked in demand.items() if other != key):
        return None
    return "over" if over_share(key, demand, weight, capacity) else "under"


def over_share(
    key: str, demand: Mapping[str, float], weight: Mapping[str, float], capacity: float
) -> bool:
    """True when a new request of ``key`` would put it over its fair share of ``capacity``.

    ``demand``: what each key holds now (in flight plus queued), without the new request.
    """
    if not any(asked > 0.0 for other, asked in demand.items() if other != key):
        return False
    asked = dict(demand)
    asked[key] = asked.get(key, 0.0) + 1.0
    return asked[key] > fair_shares(asked, weight, capacity)[key] + 1e-9

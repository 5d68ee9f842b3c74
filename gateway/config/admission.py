"""Typed configuration of admission: ``[admission]``, its per-key table and the per-route fields.

Owned here: the section :class:`AdmissionSettings` (switch, queue bounds, default wait limit,
saturation thresholds, priorities and weights per key) and :class:`RouteAdmissionSettings`, the
fields a route adds (``max_queue_wait_s``, ``spill_to``). The algorithms that read them live in
``gateway/admission/`` (see ``docs/admission.md``). ``Settings.admission`` is the section; the
route fields are flattened into ``RouteSettings`` (``gateway/config/clusters.py``), so a route
reads ``spill_to = ["managed-r1"]``; :class:`RouteAdmissionSettings` is their standalone form.

Times are seconds; weights are relative (> 0); priorities are the names in :data:`PRIORITIES`,
highest first.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.section import Section

PRIORITIES = ("interactive", "batch")
MAX_WAIT_S = 3600.0  # the most a wait limit (the queue's TTL) may be, s: finite, so a waiter always ends
"""Priority classes, highest first: a queued ``interactive`` request always leaves before a ``batch`` one."""

Priority = Literal["interactive", "batch"]


class _Section(Section):
    """This module's sections: :class:`~gateway.config.section.Section` (number fields refuse booleans)."""


class AdmissionKeySettings(_Section):
    """One key's place in admission (``[admission.keys.KEY_NAME]``)."""

    weight: float = Field(1.0, gt=0, description="Share of a saturated cluster against other keys of its priority.")
    priority: Priority = Field("interactive", description="Class of the key's requests: interactive | batch.")
    allow_priority_header: bool = Field(
        False, description="The key may raise its class per request with X-Priority: interactive; a "
        "request may always lower itself (X-Priority: batch)."
    )
    max_queued: int | None = Field(
        None, ge=0, description="Most requests of this key waiting at once; more get 429. None: [admission]'s."
    )


class AdmissionSettings(_Section):
    """Admission before scheduling: queue, spill over or shed when a cluster is saturated."""

    enabled: bool = Field(
        False, description="Judge saturation, then queue, spill over or shed. Off by default: with a cluster's "
        "slots_per_endpoint below its engine's batch size the gateway would hold requests the engine could "
        "start (docs/admission.md); set slots_per_endpoint to the engine's max_num_seqs, then turn it on."
    )
    max_queue_wait_s: float = Field(
        10.0, gt=0, le=MAX_WAIT_S, description="A route's default wait limit: longest predicted wait before a request starts, and "
        "the queue's TTL."
    )
    batch_max_queue_wait_s: float | None = Field(
        None, gt=0, le=MAX_WAIT_S, description="Wait limit of batch requests (their TTFT target is looser), s; None: the route's."
    )
    max_queue_depth: int = Field(1024, ge=0, description="Most requests waiting in the gateway per cluster.")
    max_queued_per_key: int | None = Field(
        None, ge=0, description="Most requests of one key waiting at once (429 beyond); None: no per-key bound."
    )
    kv_saturated: float = Field(
        0.95, gt=0, le=1, description="An endpoint whose engine reports this KV cache usage (0..1) takes no new "
        "request without queueing."
    )
    drain_quantile: float = Field(
        0.5, gt=0, lt=1, description="Quantile of the drain time a shed's Retry-After gives (the load model's)."
    )
    default_priority: Priority = Field("interactive", description="Class of keys not listed in [admission.keys].")
    keys: dict[str, AdmissionKeySettings] = Field(default_factory=dict, description="Weights and classes by key name.")

    def wait_limit(self, route_limit_s: float | None, priority: int) -> float:
        """The wait limit of a request of ``priority`` (index into :data:`PRIORITIES`) on a route, s."""
        if priority > 0 and self.batch_max_queue_wait_s is not None:
            return self.batch_max_queue_wait_s
        return route_limit_s if route_limit_s is not None else self.max_queue_wait_s

    def key(self, name: str) -> AdmissionKeySettings:
        """The settings of the key called ``name`` (defaults when it is not listed)."""
        found = self.keys.get(name)
        return found if found is not None else AdmissionKeySettings(priority=self.default_priority)


class RouteAdmissionSettings(_Section):
    """What a route adds to admission (flattened into ``[routes.NAME]`` by the integrator)."""

    max_queue_wait_s: float | None = Field(
        None, gt=0, le=MAX_WAIT_S, description="Wait limit of this route's requests, s; None: [admission] max_queue_wait_s."
    )
    spill_to: list[str] = Field(
        default_factory=list, description="Clusters of the chain that take the overflow when the primary is "
        "saturated, in order (managed providers included). Empty: queue or shed."
    )

    @model_validator(mode="after")
    def _unique(self) -> RouteAdmissionSettings:
        if len(set(self.spill_to)) != len(self.spill_to):
            raise ValueError("spill_to: a cluster is named twice")
        return self

    def wait_limit(self, admission: AdmissionSettings) -> float:
        """The effective wait limit of the route, seconds."""
        return self.max_queue_wait_s if self.max_queue_wait_s is not None else admission.max_queue_wait_s

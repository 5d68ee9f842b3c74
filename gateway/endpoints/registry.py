"""The registry of endpoints by cluster, built from ``[clusters.*]``, ``[health]`` and ``[circuit]``.

Clusters map to an immutable tuple of :class:`Endpoint` objects; a later change (admin API,
managed workers) swaps a whole tuple (copy-on-write), so a request that took a snapshot keeps a
consistent view.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping

from gateway.endpoints.circuit import BreakerPolicy
from gateway.endpoints.model import Endpoint, EndpointSpec, Health
from gateway.config import CircuitSettings, ClusterSettings, ConfigError, HealthSettings


def breaker_policy(circuit: CircuitSettings) -> BreakerPolicy:
    """The circuit-breaker thresholds of ``[circuit]``."""
    return BreakerPolicy(
        consecutive_failures=circuit.consecutive_failures,
        failure_ratio=circuit.failure_ratio,
        min_requests=circuit.min_requests,
        window_s=circuit.window_s,
        cooldown_s=circuit.cooldown_s,
        max_cooldown_s=circuit.max_cooldown_s,
    )


def new_endpoint(
    spec: EndpointSpec,
    health: HealthSettings,
    circuit: CircuitSettings,
    *,
    clock: Callable[[], float] = time.monotonic,
    source: str = "config",
) -> Endpoint:
    """A fresh :class:`Endpoint` with the configured health thresholds and circuit breaker."""
    return Endpoint(
        spec,
        unhealthy_threshold=health.unhealthy_threshold,
        healthy_threshold=health.healthy_threshold,
        breaker=breaker_policy(circuit),
        clock=clock,
        source=source,
    )


class EndpointRegistry:
    """Endpoints by cluster name."""

    def __init__(self, clusters: Mapping[str, tuple[Endpoint, ...]]) -> None:
        self._clusters = dict(clusters)

    @classmethod
    def from_settings(
        cls,
        clusters: Mapping[str, ClusterSettings],
        health: HealthSettings,
        circuit: CircuitSettings,
        environ: Mapping[str, str] = os.environ,
        clock: Callable[[], float] = time.monotonic,
    ) -> EndpointRegistry:
        """Build every endpoint of ``[clusters.*]`` (named ``<cluster>-<index>`` unless named).

        Raises:
            ConfigError: an endpoint's ``api_key_env`` names an unset environment variable.
        """
        built: dict[str, tuple[Endpoint, ...]] = {}
        for cluster_name, cluster in clusters.items():
            endpoints = []
            for index, config in enumerate(cluster.endpoints):
                api_key = None
                if config.api_key_env:
                    api_key = environ.get(config.api_key_env)
                    if not api_key:
                        raise ConfigError(
                            f"clusters.{cluster_name}.endpoints.{index}.api_key_env: "
                            f"environment variable {config.api_key_env} is not set"
                        )
                spec = EndpointSpec(
                    name=config.name or f"{cluster_name}-{index}",
                    cluster=cluster_name,
                    base_url=config.url,
                    served_model=config.model,
                    api_key=api_key,
                    health_url=config.health_url,
                    weight=config.weight,
                    kv_events=config.kv_events,
                )
                endpoints.append(new_endpoint(spec, health, circuit, clock=clock))
            built[cluster_name] = tuple(endpoints)
        return cls(built)

    def add(self, endpoint: Endpoint) -> None:
        """Add an endpoint to its cluster (created if new); requests in flight keep their snapshot.

        Raises:
            ValueError: an endpoint of that name exists.
        """
        if self.find(endpoint.name) is not None:
            raise ValueError(f"endpoint {endpoint.name!r} already exists")
        cluster = endpoint.spec.cluster
        self._clusters[cluster] = (*self._clusters.get(cluster, ()), endpoint)

    def remove(self, name: str) -> Endpoint | None:
        """Remove and return the endpoint called ``name`` (None if absent)."""
        endpoint = self.find(name)
        if endpoint is not None:
            cluster = endpoint.spec.cluster
            self._clusters[cluster] = tuple(e for e in self._clusters[cluster] if e is not endpoint)
        return endpoint

    def find(self, name: str) -> Endpoint | None:
        """The endpoint called ``name``, or None."""
        return next((endpoint for endpoint in self if endpoint.name == name), None)

    def cluster(self, name: str) -> tuple[Endpoint, ...]:
        """The cluster's endpoints (a snapshot); empty if the cluster has none."""
        return self._clusters.get(name, ())

    def __iter__(self) -> Iterator[Endpoint]:
        for endpoints in self._clusters.values():
            yield from endpoints

    def healthy_count(self) -> int:
        """Endpoints whose last check or request succeeded."""
        return sum(1 for endpoint in self if endpoint.health is Health.HEALTHY and not endpoint.draining)

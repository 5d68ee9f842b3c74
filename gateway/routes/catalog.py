"""Public model names and aliases, and the route each one selects.

A client's ``model`` may be a public model name from ``[models.NAME]``, one of its aliases, or a
cluster name (``reasoning``, ``fast``), which selects that tier alone. Each resolves to a
:class:`~gateway.failover.Route`: the primary cluster, then the failover chain (a model's
``failover`` list, or a named ``[routes.NAME]``), with the route's time limits. Lookup is exact
and case-sensitive, as OpenAI's is.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ModelNotFoundError
from gateway.failover import Route
from gateway.settings import Settings, TimeoutSettings


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One name a client may send: ``id`` selects ``route``; ``alias_of`` is set for aliases."""

    id: str
    route: Route
    alias_of: str | None = None

    @property
    def cluster(self) -> str:
        """The primary cluster."""
        return self.route.clusters[0]


class ModelCatalog:
    """Resolves a client's model name to a route."""

    def __init__(self, entries: list[ModelEntry], routes: dict[str, Route], default_timeouts: TimeoutSettings) -> None:
        self._entries = {entry.id: entry for entry in entries}
        self.routes = routes
        self.default_timeouts = default_timeouts

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelCatalog:
        default = settings.upstream.timeouts
        routes = {
            name: Route(name, tuple(route.clusters), timeouts=route.timeouts or default, reason="route")
            for name, route in settings.routes.items()
        }
        clusters = {name: Route(name, (name,), timeouts=default, reason="cluster") for name in settings.clusters}
        entries: list[ModelEntry] = []
        for name, model in settings.models.items():
            route = routes[model.route] if model.route else Route(name, tuple(model.chain(settings.routes)), timeouts=default)
            entries.append(ModelEntry(name, route))
            entries.extend(ModelEntry(alias, route, alias_of=name) for alias in model.aliases)
        named = {entry.id for entry in entries}
        entries.extend(ModelEntry(cluster, route) for cluster, route in clusters.items() if cluster not in named)
        return cls(entries, {**clusters, **routes}, default)

    def resolve(self, model: str) -> ModelEntry:
        """The entry for ``model``.

        Raises:
            ModelNotFoundError: (404, ``model_not_found``) for an unknown name.
        """
        entry = self._entries.get(model)
        if entry is None:
            raise ModelNotFoundError(
                f"The model `{model}` does not exist or you do not have access to it.", param="model"
            )
        return entry

    def entries(self) -> list[ModelEntry]:
        """Every public name, in config order (models, their aliases, then bare cluster names)."""
        return list(self._entries.values())

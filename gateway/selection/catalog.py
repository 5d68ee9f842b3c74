"""Public model names and aliases, and the route each one selects.

A client's ``model`` may be a public model name from ``[models.NAME]``, one of its aliases, or a
cluster name, which selects that cluster alone. Each resolves to a
:class:`~gateway.selection.route.Route`: the primary cluster, then the failover chain (a model's
``failover`` list, or a named ``[routes.NAME]``), with the route's time limits. Lookup is exact
and case-sensitive, as OpenAI's is.

Once a cluster has a ``tier``, three **route selection aliases** exist (``selects`` is set on
their entries; ``selection/selector.py`` decides their route per request): ``auto`` (the policy
chooses the tier), ``reasoning`` and ``fast`` (the best cluster of that tier). Their catalog route
is the fallback order when nothing is known: the reasoning tier's clusters, then the fast tier's,
in config order (one tier only for a tier alias). A tier alias answers in place of a cluster of
the same name; public model names may not take these names (``config/selection.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ModelNotFoundError
from gateway.selection.route import Route
from gateway.config import ALIASES, TIERS
from gateway.config import Settings, TimeoutSettings


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One name a client may send: ``id`` selects ``route``; ``alias_of`` is set for aliases.

    ``selects`` is ``auto``, ``reasoning`` or ``fast`` for the route selection aliases.
    """

    id: str
    route: Route
    alias_of: str | None = None
    selects: str | None = None

    @property
    def cluster(self) -> str:
        """The primary cluster."""
        return self.route.clusters[0]


def route_timeouts(own: TimeoutSettings | None, default: TimeoutSettings) -> TimeoutSettings:
    """A route's ``[routes.NAME.timeouts]`` over ``[upstream.timeouts]``: the fields the route sets
    win, the others come from ``[upstream.timeouts]`` (not from the built-in defaults)."""
    if own is None:
        return default
    return default.model_copy(update={name: getattr(own, name) for name in own.model_fields_set})


class ModelCatalog:
    """Resolves a client's model name to a route."""

    def __init__(self, entries: list[ModelEntry], routes: dict[str, Route], default_timeouts: TimeoutSettings) -> None:
        self._entries = {entry.id: entry for entry in entries}
        self._reach: dict[frozenset[str], frozenset[str]] = {}
        self.routes = routes
        self.default_timeouts = default_timeouts

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelCatalog:
        default = settings.upstream.timeouts
        routes = {
            name: Route(
                name, tuple(route.clusters), timeouts=route_timeouts(route.timeouts, default), reason="route",
                spill_to=tuple(route.spill_to), max_queue_wait_s=route.max_queue_wait_s,
            )
            for name, route in settings.routes.items()
        }
        clusters = {name: Route(name, (name,), timeouts=default, reason="cluster") for name in settings.clusters}
        entries: list[ModelEntry] = []
        for name, model in settings.models.items():
            route = routes[model.route] if model.route else Route(name, tuple(model.chain(settings.routes)), timeouts=default)
            entries.append(ModelEntry(name, route))
            entries.extend(ModelEntry(alias, route, alias_of=name) for alias in model.aliases)
        entries.extend(_selection_aliases(settings, default))
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

    def alias_of(self, model: str) -> str | None:
        """The public model name ``model`` is an alias of (``[models.NAME] aliases``); None for a
        public name, a route selection alias, a cluster name or an unknown name. A key allowed a
        model may call its aliases (``KeyLimits.allows``)."""
        entry = self._entries.get(model)
        return None if entry is None else entry.alias_of

    def clusters_of(self, models: frozenset[str]) -> frozenset[str]:
        """Every cluster the names in ``models`` may be served by: their routes' clusters,
        failover chains included (a key's allow-list, checked on the route a request will take),
        and for a public name, its aliases' (the same route). Unknown names add nothing. Memoized
        per set until the next :meth:`replace`."""
        found = self._reach.get(models)
        if found is None:
            entries = (self._entries.get(name) for name in models)
            found = frozenset(cluster for entry in entries if entry is not None for cluster in entry.route.clusters)
            if len(self._reach) >= 1024:
                self._reach.clear()
            self._reach[models] = found
        return found

    def entries(self) -> list[ModelEntry]:
        """Every public name, in config order (models, their aliases, then bare cluster names)."""
        return list(self._entries.values())

    def replace(self, other: ModelCatalog) -> None:
        """Take ``other``'s names and routes (a config reload); a request sees the old or the new."""
        self._entries, self.routes, self.default_timeouts = other._entries, other.routes, other.default_timeouts
        self._reach = {}


def _selection_aliases(settings: Settings, timeouts: TimeoutSettings) -> list[ModelEntry]:
    """``auto``, ``reasoning`` and ``fast`` when clusters declare tiers (see the module docstring)."""
    by_tier = {tier: [name for name, c in settings.clusters.items() if c.tier == tier] for tier in TIERS}
    chains = {"auto": by_tier["reasoning"] + by_tier["fast"], **by_tier}
    return [
        ModelEntry(alias, Route(alias, tuple(chains[alias]), timeouts=timeouts, reason=alias), selects=alias)
        for alias in ALIASES
        if chains[alias]
    ]

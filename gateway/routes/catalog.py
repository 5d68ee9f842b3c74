"""Public model names and aliases, and the cluster each one selects.

A client's ``model`` may be a public model name from ``[models.NAME]``, one of its aliases, or a
cluster name (``reasoning``, ``fast``), which selects that tier directly. Lookup is exact and
case-sensitive, as OpenAI's is.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ModelNotFoundError
from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One name a client may send: ``id`` selects ``cluster``; ``alias_of`` is set for aliases."""

    id: str
    cluster: str
    alias_of: str | None = None


class ModelCatalog:
    """Resolves a client's model name to a cluster."""

    def __init__(self, entries: list[ModelEntry]) -> None:
        self._entries = {entry.id: entry for entry in entries}

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelCatalog:
        entries: list[ModelEntry] = []
        for name, model in settings.models.items():
            entries.append(ModelEntry(name, model.cluster))
            entries.extend(ModelEntry(alias, model.cluster, alias_of=name) for alias in model.aliases)
        named = {entry.id for entry in entries}
        entries.extend(ModelEntry(cluster, cluster, alias_of=None) for cluster in settings.clusters if cluster not in named)
        return cls(entries)

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

"""Typed errors of the catalog; the API translates them into its own (`twofold.api.errors`)."""

from __future__ import annotations


class CatalogError(Exception):
    """Base class of the catalog's errors."""


class EntryExists(CatalogError):
    """A create named an object the catalog already has."""

    def __init__(self, name: str, kind: str, differences: list[str]) -> None:
        self.name = name
        self.kind = kind
        self.differences = differences
        why = f": {'; '.join(differences)}" if differences else ""
        article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
        super().__init__(f"{name!r} already exists as {article} {kind}{why}")


class UnknownEntry(CatalogError, KeyError):
    """A name the catalog does not have (e.g. dropped by another process)."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"no object named {name!r} in the catalog; known: {known}")

    def __str__(self) -> str:
        return str(self.args[0])


class HasDependents(CatalogError):
    """A drop would orphan objects that read the dropped one."""

    def __init__(self, name: str, dependents: list[str]) -> None:
        self.name = name
        self.dependents = dependents
        super().__init__(f"{name!r} is read by {dependents}; drop those first, or drop with "
                         f"cascade=True to drop them too")


class MissingDependency(CatalogError):
    """A create names an input the catalog no longer has (dropped meanwhile)."""

    def __init__(self, name: str, missing: list[str]) -> None:
        self.name = name
        self.missing = missing
        super().__init__(f"{name!r} reads {missing}, which the catalog does not have "
                         f"(dropped, maybe by another process)")


class CatalogConflict(CatalogError):
    """Other writers kept changing the catalog; the change was not applied. Retry it."""


class CorruptCatalog(CatalogError):
    """The catalog shard holds something this version cannot read."""

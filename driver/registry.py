"""One tiny registry type for every plug-in kind: frameworks, launchers, runtimes, log parsers,
upstream sources.

Each kind's registry stands beside the interface its plug-ins implement (``FRAMEWORKS`` in
``driver/frameworks/base.py``, ``LAUNCHERS``, ``PARSERS``, ``RUNTIMES`` and ``SOURCES`` in their
packages' ``base.py``), so this module imports nothing of the kit. Plug-ins register themselves
by name with a decorator (``@LAUNCHERS.register("torchrun")``); ``driver.plugins.load``
imports the plug-in modules of a kind once so its registry is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownPlugin(KeyError):
    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind, self.name, self.known = kind, name, known
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {', '.join(known) or '(none)'}")

    def __str__(self) -> str:  # KeyError would print the repr with quotes
        return self.args[0]


class Registry(Generic[T]):
    """Plug-ins by name. Names match case-insensitively, and an entry's ``alias_fields`` (e.g. a
    framework's folder, ``PaddlePaddle``) are other spellings users type for the same entry."""

    def __init__(self, kind: str, alias_fields: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.alias_fields = alias_fields
        self._entries: dict[str, T] = {}
        self._spellings: dict[str, str] = {}  # lower-case spelling -> canonical name

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            self.add(name, entry)
            return entry

        return decorate

    def add(self, name: str, entry: T) -> T:
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        aliases = (getattr(entry, field, None) for field in self.alias_fields)
        spellings = {name.lower(), *(str(alias).lower() for alias in aliases if alias)}
        for spelling in spellings:
            owner = self._spellings.get(spelling, name)
            if owner != name:  # checked before anything is added: no half-registered entry
                raise ValueError(f"{self.kind} {name!r}: {spelling!r} already names {owner!r}")
        self._entries[name] = entry
        self._spellings.update(dict.fromkeys(spellings, name))
        return entry

    def canonical(self, name: str) -> str:
        """The registered name for any accepted spelling (``PaddlePaddle`` -> ``paddle``)."""
        try:
            return self._spellings[str(name).lower()]
        except KeyError:
            raise UnknownPlugin(self.kind, str(name), self.names()) from None

    def get(self, name: str) -> T:
        return self._entries[self.canonical(name)]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._spellings

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

"""Per-thread scopes: code run inside ``with scope.entered():`` sees ``scope.active()``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ThreadScope:
    """A per-thread nesting depth (blocks nest; another thread never sees this one's)."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def entered(self) -> Iterator[None]:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            yield
        finally:
            local.depth -= 1

    def active(self) -> bool:
        return getattr(self._local, "depth", 0) > 0


__all__ = ["ThreadScope"]

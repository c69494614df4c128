"""Provides the Inbox: a locked hand-over list between a reader thread and the UI thread."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Inbox(Generic[T]):
    """Items put by one thread, drained in one go by the UI thread.

    `put` says whether the inbox was empty, so the thread posts one doorbell
    message per drain instead of one per item: at 1,000 events/s a message per
    event would flood the message queue.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[T] = []

    def put(self, item: T) -> bool:
        """Add one item; True when the inbox was empty (ring the doorbell)."""
        with self._lock:
            self._items.append(item)
            return len(self._items) == 1

    def drain(self) -> list[T]:
        """Take every item put so far, oldest first."""
        with self._lock:
            items, self._items = self._items, []
            return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

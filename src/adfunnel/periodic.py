"""A daemon thread that calls a function every few seconds until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``fn`` every ``every_s`` seconds on a daemon thread; an exception is logged
    and the next round runs as usual (the database or a peer may be briefly away)."""

    def __init__(self, fn: Callable[[], object], every_s: float, name: str) -> None:
        self.fn = fn
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def stop(self, *, final: bool = False) -> None:
        """Stop the thread; with ``final`` call ``fn`` once more (a last flush)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if final:
            self._call()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._call()

    def _call(self) -> None:
        try:
            self.fn()
        except Exception:
            log.exception("periodic %s failed", self._thread.name)

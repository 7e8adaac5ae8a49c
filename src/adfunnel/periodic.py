"""Periodic work on the injected domain clock (DESIGN.md §Money and budgets, "One clock").

:class:`DueTimes` is the pure part: given a domain instant it says which named jobs are
due. :class:`Ticker` runs due jobs from a daemon thread that looks at the clock every
``poll_s`` real seconds (the poll interval is plumbing; *when* a job runs is decided by
domain time only), and can also be driven synchronously (``run_due``) by whoever moves
a manual clock, so a replay is deterministic.

A job is due when it never ran, when ``every_s`` of domain time passed since it last
ran, or when the clock went back before its last run (a manual clock first set to a
replay's past, say): a schedule never waits for a machine-time instant that domain time
will not reach.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from adfunnel.clock import Clock

log = logging.getLogger(__name__)


class DueTimes:
    """Which jobs are due at a domain instant. Pure; not thread-safe by itself.

    Args:
        every_s: job name -> period in seconds of domain time (> 0).
    """

    def __init__(self, every_s: dict[str, float]) -> None:
        for name, every in every_s.items():
            if every <= 0:
                raise ValueError(f"{name}: period must be > 0 s, got {every}")
        self.every_s = dict(every_s)
        self._last: dict[str, float] = {}

    def due(self, t: float) -> list[str]:
        """Names due at Unix time ``t`` (in declaration order); marks them as run at ``t``."""
        out = []
        for name, every in self.every_s.items():
            last = self._last.get(name)
            if last is None or t >= last + every or t < last:
                self._last[name] = t
                out.append(name)
        return out

    def last_run(self, name: str) -> float | None:
        return self._last.get(name)


@dataclass(frozen=True, slots=True)
class Job:
    """``fn`` runs every ``every_s`` seconds of domain time."""

    name: str
    every_s: float
    fn: Callable[[], object]


class Ticker:
    """Runs :class:`Job` s when domain time says they are due.

    ``run_due(t)`` runs them now in the caller's thread; ``start()`` adds a daemon thread
    that calls ``run_due(clock.now())`` every ``poll_s`` real seconds. One lock: jobs
    never run concurrently with each other. An exception is logged and the job runs
    again when next due (the database or a peer may be briefly away).
    """

    def __init__(self, clock: Clock, jobs: Sequence[Job], *, name: str,
                 poll_s: float = 0.1) -> None:
        self.clock = clock
        self.jobs = {j.name: j for j in jobs}
        self.name = name
        self.poll_s = poll_s
        self._due = DueTimes({j.name: j.every_s for j in jobs})
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = dict.fromkeys(self.jobs, 0)

    def run_due(self, t: float | None = None) -> list[str]:
        """Run every job due at Unix time ``t`` (default: the clock's now); their names."""
        with self._lock:
            now = self.clock.now().timestamp() if t is None else t
            names = self._due.due(now)
            for name in names:
                self._call(name)
            return names

    def run_all(self) -> None:
        """Run every job once now, due or not (start-up, a final flush)."""
        with self._lock:
            for name in self.jobs:
                self._call(name)

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, *, final: bool = False) -> None:
        """Stop the thread; with ``final`` run every job once more (a last flush)."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=5)
        if final:
            self.run_all()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.run_due()

    def _call(self, name: str) -> None:
        try:
            self.jobs[name].fn()
            self.runs[name] += 1
        except Exception:
            log.exception("%s: job %s failed", self.name, name)


class Periodic:
    """Calls ``fn`` every ``every_s`` seconds of domain time (``clock``, the injected
    clock: never the machine's behind the domain's back) on a daemon thread: a
    :class:`Ticker` of one job.

    With ``run_on_move`` and a :class:`~adfunnel.clock.ManualClock`, due work also runs
    in the mover's thread right after each move (as the embedded budget service's does),
    so a replay that moves the clock reads what the job made of the time it reached.
    """

    def __init__(self, fn: Callable[[], object], every_s: float, name: str,
                 clock: Clock, *, run_on_move: bool = False) -> None:
        from adfunnel.clock import ManualClock

        self.fn = fn
        self.every_s = every_s
        self._ticker = Ticker(clock, [Job(name, every_s, fn)], name=name,
                              poll_s=min(0.1, every_s))
        # the first run is one period after the start, as a plain timer loop would
        self._ticker._due.due(self._ticker.clock.now().timestamp())
        self._stopped = False
        if run_on_move and isinstance(clock, ManualClock):
            clock.on_move(self._moved)

    def start(self) -> Periodic:
        self._ticker.start()
        return self

    def run_due(self, t: float | None = None) -> bool:
        """Call ``fn`` now if it is due at Unix time ``t`` (default: the clock's now)."""
        return bool(self._ticker.run_due(t))

    def stop(self, *, final: bool = False) -> None:
        """Stop the thread; with ``final`` call ``fn`` once more (a last flush)."""
        self._stopped = True
        self._ticker.stop(final=final)

    def _moved(self, at: datetime) -> None:
        if not self._stopped:  # a stopped job's resources (its engine) may be gone
            self.run_due(at.timestamp())

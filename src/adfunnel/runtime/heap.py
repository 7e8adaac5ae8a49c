"""The process heap and the cyclic garbage collector.

A server process holds a large, long-lived heap after its start-up (modules, the
catalogue, the campaign read model: a tracker about 420,000 objects). Every full
collection of the cyclic collector scans all of it: 180 ms once per ~40,000 beacons in a
tracker, ~15 % of a busy aggregator's time. :func:`freeze_heap` moves the start-up heap
out of the collector's reach (:func:`gc.freeze`); reference counting still frees those
objects, only cycles among them would outlive their use.
"""

from __future__ import annotations

import gc


def freeze_heap() -> None:
    """Collect once, then freeze everything alive: call at the end of a server process's
    start-up (:func:`adfunnel.runtime.app.serve_http` does, for ``serve``, its workers and
    ``tracker``; ``adfunnel aggregator`` too), never in a process that builds many apps
    (a test run: what is frozen is never collected as a cycle)."""
    gc.collect()
    gc.freeze()

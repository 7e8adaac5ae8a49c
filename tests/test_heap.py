"""freeze_heap: what is alive at the end of start-up leaves the cyclic collector."""

from __future__ import annotations

import gc
import weakref

import pytest

from adfunnel.runtime.heap import freeze_heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


@pytest.mark.slow
def test_garbage_is_collected_first_and_the_live_heap_is_frozen() -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    kept = Node()
    try:
        freeze_heap()
        assert gone() is None  # collected before the freeze, not frozen for ever
        assert gc.get_freeze_count() > 0
        assert kept.me is kept
    finally:
        gc.unfreeze()  # this test process builds many apps: leave it as it was

"""Frequency caps per user: which counters a candidate needs (``windows``, pure), and the
stores that keep them (``store``: interface and in-memory; ``redis_store``: Redis).

DESIGN.md §Frequency caps. A request reads a user's counters once
(:meth:`~adfunnel.frequency.store.FrequencyStore.read`), drops the candidates a cap
binds (:func:`~adfunnel.frequency.windows.evaluate`), and after the auction checks and
counts its winners in one atomic call
(:meth:`~adfunnel.frequency.store.FrequencyStore.check_and_increment`).
"""

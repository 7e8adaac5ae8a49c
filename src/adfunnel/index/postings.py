"""Posting lists of a segment: their entry encoding and their bulk construction.

An ``∈`` entry is a ``uint32`` ``conj_id << SLOT_BITS | slot``; a ``∉`` entry a
``uint32`` conjunction id. Lists are stored per key as CSR (offsets, values), each
sorted ascending, so a query reads conjunction ids best ad first
(:mod:`adfunnel.index.segment`). A dense group is a packed bitmap row over
conjunction ids (bit c of little-endian ``uint64`` words); :func:`bits_ids` reads one
back.
"""

from __future__ import annotations

import numpy as np

from adfunnel.index.table import ranges
from adfunnel.targeting.dnf import MAX_IN_TERMS

#: Bits of a posting entry that carry the term slot (MAX_IN_TERMS = 2**SLOT_BITS).
SLOT_BITS = 5
assert MAX_IN_TERMS <= 1 << SLOT_BITS, "a term slot must fit in SLOT_BITS"
SLOT_MASK = (1 << SLOT_BITS) - 1
#: Most conjunctions one segment holds (conjunction ids use the other 27 bits).
MAX_SEGMENT_CONJUNCTIONS = 1 << (32 - SLOT_BITS)


def csr(keys: np.ndarray, values: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort (key, value) pairs; return per-key offsets int64[n_keys + 1] and values uint32."""
    pairs = (keys.astype(np.uint64) << np.uint64(32)) | values.astype(np.uint64)
    del keys
    pairs.sort()
    off = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount((pairs >> np.uint64(32)).astype(np.int64), minlength=n_keys), out=off[1:])
    return off, (pairs & np.uint64(0xFFFFFFFF)).astype(np.uint32)



def postings_radix(
    conj_src: np.ndarray,
    tc_off: np.ndarray,
    entry_key: np.ndarray,
    entry_slot: np.ndarray | None,
    n_keys: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Posting lists when key ids fit in 16 bits: one stable radix sort by key.

    Entries are produced in conjunction order (so each key's list comes out
    sorted) and grouped by key with numpy's O(n) radix sort for 16-bit keys.
    ``conj_src[c]`` is the template conjunction of conjunction c; ``tc_off`` the
    CSR offsets of template entries. Returns offsets int64[n_keys + 1], values uint32.
    """
    lens = tc_off[conj_src + 1] - tc_off[conj_src]
    src = ranges(tc_off[conj_src], lens)
    key = entry_key[src].astype(np.uint16)
    vals = np.repeat(np.arange(len(conj_src), dtype=np.uint32), lens)
    del lens
    if entry_slot is not None:
        vals <<= np.uint32(SLOT_BITS)
        vals |= entry_slot[src]
    del src
    off = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n_keys), out=off[1:])
    order = np.argsort(key, kind="stable")
    del key
    return off, vals[order]



def postings(
    entry_tc: np.ndarray,
    entry_key: np.ndarray,
    entry_slot: np.ndarray | None,
    inst: np.ndarray,
    inst_off: np.ndarray,
    n_keys: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Posting lists from template-level entries (template conjunction, key[, slot]).

    Returns per-key offsets int64[n_keys + 1] and the values (uint32): conjunction
    ids, shifted left by SLOT_BITS and or-ed with the slot when ``entry_slot`` is given.
    """
    order = np.argsort(entry_key, kind="stable")
    tc, key = entry_tc[order], entry_key[order]
    lens = inst_off[tc + 1] - inst_off[tc]
    vals = inst[ranges(inst_off[tc], lens)]
    if entry_slot is not None:
        vals <<= np.uint32(SLOT_BITS)
        vals |= np.repeat(entry_slot[order], lens)
    ent_off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ent_off[1:])
    first = np.searchsorted(key, np.arange(n_keys + 1))
    off = ent_off[first]
    # a key's list is the concatenation of sorted runs (one per template entry): merge them
    for k in np.flatnonzero(np.diff(first) > 1).tolist():
        vals[off[k] : off[k + 1]].sort(kind="stable")
    return off, vals



def bits_ids(words: np.ndarray, limit: int) -> np.ndarray:
    """Set bit positions (uint32, ascending) of packed ``words``, below ``limit``."""
    bits = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool)[:limit]
    return np.flatnonzero(bits).astype(np.uint32)


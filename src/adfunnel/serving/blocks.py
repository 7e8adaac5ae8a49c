"""A request's block lists on the ad server: which candidates they refuse (reason
``blocked``), on both decision paths.

- :func:`request_blocks` reads the request's lists in the form they are compared in
  (None without any: the decision then pays nothing for them);
- :meth:`RequestBlocks.detail` is the reference path's per-ad check (what blocks it:
  ``category IAB7``, ``domain ford.com``, ``app com.foo``);
- :class:`BlockBook` is the catalogue's inverted index: every ad filed under each key a
  block could name (its categories and their parents, its domains — declared, else
  its landing host — and their parent domains, its bundle;
  :mod:`adfunnel.targeting.blocks`), so the columnar path finds the blocked ads with
  one look-up per blocked entry, and caches that answer per
  distinct block lists (exchanges repeat theirs on every request);
- :func:`drop_blocked` removes them from the columnar filter's candidates.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from adfunnel.campaigns.model import Ad
from adfunnel.serving.request import SelectRequest
from adfunnel.targeting.blocks import (
    ad_domains,
    blocking_category,
    blocking_domain,
    category_keys,
    domain_keys,
    landing_domain,
    request_category,
    request_domain,
)

#: Distinct block lists whose blocked ad ids a book keeps.
CACHED_LISTS = 256
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class RequestBlocks:
    """A request's block lists as compared: categories upper case, domains canonical,
    apps exact."""

    categories: frozenset[str]
    domains: frozenset[str]
    apps: frozenset[str]

    def detail(self, ad: Ad) -> str | None:
        """What blocks ``ad`` (``category IAB7``, ``domain ford.com``, ``app x``), or None
        when nothing does. Categories first, then domains, then the app."""
        if ad.categories and self.categories:
            found = blocking_category(ad.categories, self.categories)
            if found is not None:
                return f"category {found}"
        if self.domains:
            found = blocking_domain(ad_domains(ad.adomain, ad.landing_url), self.domains)
            if found is not None:
                return f"domain {found}"
        if ad.bundle is not None and ad.bundle in self.apps:
            return f"app {ad.bundle}"
        return None

    def book_keys(self) -> frozenset[tuple[str, str]]:
        """The book keys these lists name."""
        return frozenset([*(("c", c) for c in self.categories),
                          *(("d", d) for d in self.domains), *(("b", b) for b in self.apps)])


def request_blocks(req: SelectRequest) -> RequestBlocks | None:
    """The request's block lists, or None when it has none (the common case).

    Parsed once per distinct lists (an exchange sends the same ones on every request:
    normalising a few hundred domains costs about 1 ms)."""
    if not (req.blocked_categories or req.blocked_domains or req.blocked_apps):
        return None
    return _parse(tuple(req.blocked_categories), tuple(req.blocked_domains),
                  tuple(req.blocked_apps))


@lru_cache(maxsize=CACHED_LISTS)
def _parse(categories: tuple[str, ...], domains: tuple[str, ...], apps: tuple[str, ...]
           ) -> RequestBlocks:
    return RequestBlocks(frozenset(request_category(c) for c in categories),
                         frozenset(request_domain(d) for d in domains),
                         frozenset(a.strip() for a in apps))


def ad_keys(ad: Ad) -> frozenset[tuple[str, str]]:
    """Every book key whose block refuses ``ad``. An ad that declares nothing has its
    landing host's keys: one set shared by the ads of that host (a catalogue of 100,000
    such ads holds a dictionary entry each, not a set each)."""
    if not (ad.categories or ad.adomain or ad.bundle is not None):
        return _domain_keys(landing_domain(ad.landing_url))
    keys = [("c", k) for c in ad.categories for k in category_keys(c)]
    keys += [("d", k) for d in ad_domains(ad.adomain, ad.landing_url)
             for k in domain_keys(d)]
    if ad.bundle is not None:
        keys.append(("b", ad.bundle))
    return frozenset(keys)


@lru_cache(maxsize=65_536)
def _domain_keys(domains: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return frozenset(("d", k) for d in domains for k in domain_keys(d))


class BlockBook:
    """Ads by the keys a block could name: the catalogue's side (no I/O). ``put`` is
    called with every ad the catalogue takes; :meth:`blocked_ids` is thread-safe."""

    def __init__(self) -> None:
        self._ads: dict[tuple[str, str], set[int]] = {}  # key -> ad ids
        self._keys: dict[int, frozenset[tuple[str, str]]] = {}  # ad id -> its keys
        self._generation = 0
        self._cache: OrderedDict[RequestBlocks, tuple[int, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, ads: Iterable[Ad]) -> None:
        """Take the block fields of ``ads`` (new or changed)."""
        with self._lock:
            for ad in ads:
                keys = ad_keys(ad)
                held = self._keys.get(ad.id, frozenset())
                if keys == held:
                    continue
                for key in held - keys:
                    ids = self._ads[key]
                    ids.discard(ad.id)
                    if not ids:
                        del self._ads[key]
                for key in keys - held:
                    self._ads.setdefault(key, set()).add(ad.id)
                if keys:
                    self._keys[ad.id] = keys
                else:
                    self._keys.pop(ad.id, None)
                self._generation += 1

    def blocked_ids(self, blocks: RequestBlocks) -> np.ndarray:
        """Sorted ids (int64) of every held ad the lists refuse; empty when none."""
        with self._lock:
            if not self._keys:
                return _NONE
            held = self._cache.get(blocks)
            if held is not None and held[0] == self._generation:
                self._cache.move_to_end(blocks)
                return held[1]
            found: set[int] = set()
            for key in blocks.book_keys():
                ids = self._ads.get(key)
                if ids:
                    found |= ids
            out = np.array(sorted(found), dtype=np.int64) if found else _NONE
            self._cache[blocks] = (self._generation, out)
            self._cache.move_to_end(blocks)
            while len(self._cache) > CACHED_LISTS:
                self._cache.popitem(last=False)
            return out


def drop_blocked(book: BlockBook, blocks: RequestBlocks, ids: np.ndarray,
                 *columns: np.ndarray) -> tuple[int, np.ndarray, tuple[np.ndarray, ...]]:
    """(how many of ``ids`` the lists refuse, the other ids, ``columns`` cut alike);
    ``columns`` are parallel to ``ids``."""
    blocked = book.blocked_ids(blocks)
    if not len(blocked) or not len(ids):
        return 0, ids, columns
    out = np.isin(ids, blocked, assume_unique=False)
    n = int(np.count_nonzero(out))
    if not n:
        return 0, ids, columns
    keep = ~out
    return n, ids[keep], tuple(c[keep] for c in columns)

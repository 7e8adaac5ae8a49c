"""The interface every ad index implements (DESIGN.md §The funnel, step 2)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from adfunnel.targeting.evaluate import RequestAttributes
from adfunnel.targeting.expr import Expr

#: Most ads one retrieval returns (DESIGN.md: best K by static score).
DEFAULT_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What one query saw.

    ``ad_ids`` are the matching ads, best static score first; ``version`` is the
    index version read (every decision records it); ``truncated`` is True when
    more ads matched than ``limit``.
    """

    ad_ids: list[int]
    version: int
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class ArrayRetrieval:
    """:class:`Retrieval` with ``ad_ids`` as an int64 numpy array (same order)."""

    ad_ids: np.ndarray
    version: int
    truncated: bool = False


def query_array(index: AdIndex, request: RequestAttributes, limit: int) -> ArrayRetrieval:
    """``index``'s retrieval as an array: its own ``query_array`` where it has one."""
    fast = getattr(index, "query_array", None)
    if fast is not None:
        return fast(request, limit)
    r = index.query(request, limit)
    return ArrayRetrieval(np.asarray(r.ad_ids, dtype=np.int64), r.version, r.truncated)


class AdIndex(Protocol):
    """Ads keyed by integer id, each with one targeting expression and a static score.

    Writers (``upsert``/``remove``) may run while readers query: a query sees one
    consistent version, never a half-applied ad.
    """

    @property
    def version(self) -> int:
        """Increases by at least one on every applied write."""
        ...

    def upsert(self, ad_id: int, expr: Expr, static_score: float = 0.0) -> None:
        """Add or replace one ad's targeting and static score (expected value per impression)."""
        ...

    def remove(self, ad_id: int) -> None:
        """Remove one ad; removing an unknown ad is a no-op."""
        ...

    def build(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Replace the whole content with ``(ad id, expression, static score)`` items."""
        ...

    def upsert_many(self, ads: Iterable[tuple[int, Expr, float]]) -> None:
        """Add or replace several ads in one version (a campaign edit is never half-applied)."""
        ...

    def remove_many(self, ad_ids: Iterable[int]) -> None:
        """Remove several ads in one version; unknown ids are ignored."""
        ...

    def query(self, request: RequestAttributes, limit: int = DEFAULT_LIMIT) -> Retrieval:
        """The ads whose targeting ``request`` satisfies, at most ``limit``, best first."""
        ...

    def __len__(self) -> int: ...

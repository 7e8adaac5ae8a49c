"""Cursor pagination of the API's lists, and the refusal of unknown query parameters.

Every list answers ``{"items": [...], "next_cursor": str | null}``: at most ``limit``
items (1 … :data:`MAX_LIMIT`, default :data:`DEFAULT_LIMIT`) in key order, and the
cursor of the next page (null on the last). A cursor is opaque to clients: URL-safe
base64 of the list's name and the last key it showed, so the next page is a keyset
query (``key > cursor``). The key must only grow with creation (a numeric id, a
creation sequence, a creation time): then rows added between pages are neither skipped
nor repeated. A key new rows can sort before (an id the caller chooses, a random key
prefix) breaks that: tests/campaigns/test_pagination_growth.py holds every list to it.
A cursor of another list, text that is not a cursor, or a (forged) integer key past 64
bits is refused with 422 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Generic, Protocol, TypeVar

from fastapi import Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel

from adfunnel.http_errors import validation_error
from adfunnel.json_depth import nesting_problem

T = TypeVar("T")
K = TypeVar("K", int, str)

#: Items of a page unless ``limit`` says otherwise.
DEFAULT_LIMIT = 100
#: Most items one page may hold.
MAX_LIMIT = 500
#: The range of an integer key a database column holds (64-bit signed).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Most items on this page.")]
Cursor = Annotated[str | None, Query(description="The previous page's next_cursor.")]


class Page(BaseModel, Generic[T]):
    """One page of a list: ``items`` in key order; ``next_cursor`` (null: the last page)."""

    items: list[T]
    next_cursor: str | None = None


def encode_cursor(name: str, key: int | str) -> str:
    """The opaque cursor of list ``name`` after ``key``."""
    raw = json.dumps({"l": name, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(name: str, cursor: str | None, kind: type[K]) -> K | None:
    """The key a cursor of list ``name`` stands after (None without a cursor).

    Raises:
        ApiError: 422 naming ``cursor`` for text that is not a cursor of this list.
    """
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        # a cursor is 2 levels deep; a deeper one is not ours (and would recurse)
        data = json.loads(raw) if nesting_problem(raw, max_depth=2) is None else None
        key = data["k"] if data.get("l") == name else None
    except (ValueError, binascii.Error, TypeError, KeyError, AttributeError):
        key = None
    if (not isinstance(key, kind) or isinstance(key, bool)
            or (isinstance(key, int) and not INT64_MIN <= key <= INT64_MAX)):
        # a forged key past 64 bits would overflow the keyset query (a 500)
        raise validation_error(("cursor", "not a cursor of this list"))
    return key


def page(name: str, rows: Sequence[T], limit: int, key: Callable[[T], int | str]) -> Page[T]:
    """The page of ``rows`` (at most ``limit + 1`` rows after the cursor, in key order:
    one more than a page tells whether another page follows)."""
    shown = list(rows[:limit])
    more = len(rows) > limit
    return Page[T](items=shown, next_cursor=encode_cursor(name, key(shown[-1]))
                   if more and shown else None)


class _Keyed(Protocol):
    @property
    def id(self) -> int: ...


def by_id(item: _Keyed) -> int:
    """The page key of a record listed by its integer ``id``."""
    return item.id


def after(rows: Sequence[T], key: Callable[[T], K], start: K | None, limit: int) -> list[T]:
    """``limit + 1`` rows of ``rows`` (sorted by ``key``) whose key is above ``start``:
    a keyset page of a list held in memory."""
    chosen = [r for r in rows if start is None or key(r) > start]
    return chosen[:limit + 1]


def known_query_only(request: Request) -> None:
    """FastAPI dependency: 422 naming each query parameter the route does not declare.

    Raises:
        ApiError: 422 ``validation`` with one ``(name, "unknown query parameter")`` each.
    """
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = _declared(route)
    unknown = sorted({k for k in request.query_params if k not in known})
    if unknown:
        raise validation_error(*((k, "unknown query parameter") for k in unknown))


# kept on the route itself: a cache by id(route) outlives its route, and a later app's
# route at the same address was judged by a dead route's parameters
_DECLARED_ATTR = "adfunnel_declared_query_names"


def _declared(route: APIRoute) -> frozenset[str]:
    names: frozenset[str] | None = route.__dict__.get(_DECLARED_ATTR)
    if names is None:
        names = frozenset(_query_names(route.dependant))
        setattr(route, _DECLARED_ATTR, names)
    return names


def _query_names(dependant: Dependant) -> list[str]:
    """The query parameters of a route and of every dependency it has, by alias."""
    names = [p.alias for p in dependant.query_params]
    for sub in dependant.dependencies:
        names.extend(_query_names(sub))
    return names

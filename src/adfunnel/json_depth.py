"""The nesting depth of a JSON document, bounded before any decoder sees it.

Python's ``json`` and msgspec both decode by recursion: a body of arrays nested a
thousand deep (``[[[[…]]]]``, a few kilobytes) raises ``RecursionError`` inside the
decoder, which no route expects (a 500). Every decoder of outside input asks
:func:`nesting_problem` first, so a too-deep document is refused as a field problem
(``user.attributes.interests``: "nested deeper than 64 levels") before it is decoded.

No document adfunnel accepts comes near the bound: a select request is 4 levels deep,
a campaign with targeting at the expression tree's own limit (12 levels,
``adfunnel.targeting.expr.MAX_DEPTH``, two JSON levels each) under 30.

Cost: two ``bytes.count`` calls when the document holds no more opening brackets than
the bound (every select request): 0.9 to 3.5 µs for a 167-byte select body on a shared
2-core machine (load average 5 to 17). Otherwise the depth is counted with numpy,
strings left out, and only a document that is too deep has its member named (numpy
again, no token loop): about 5 ms for a 60 kB body of 10,000 brackets at load average
17 (an upper figure). Bodies are at most ``max_body_bytes`` (64 kB) before this runs.
"""

from __future__ import annotations

import re

import numpy as np

#: The deepest nesting of arrays and objects accepted in any JSON input (the document
#: itself is level 1: ``{"a": [1]}`` is 2 levels deep).
MAX_JSON_DEPTH = 64
#: Named members shown at most in the field of a too-deep document.
_MAX_NAMES = 8

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
#: the member name before a value (escapes already removed), searched in a window
_KEY_BEFORE = re.compile(rb'"([^"]*)"\s*:\s*\Z')
_KEY_WINDOW = 512
#: byte → its step in depth as int8: 1 opens, 255 (-1) closes, 0 anything else
_STEPS = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))
_QUOTE = ord('"')


def nesting_problem(document: bytes | str, max_depth: int = MAX_JSON_DEPTH,
                    prefix: str = "") -> tuple[str, str] | None:
    """``(field, problem)`` when ``document`` nests arrays and objects deeper than
    ``max_depth`` levels, else None. ``field`` is the dotted path of the deepest object
    member above the excess (``user.attributes.interests``; ``prefix`` before it, or
    ``prefix`` alone, or ``body`` at the top), as the API names fields.

    Malformed JSON is not judged here (its decoder refuses it); an unterminated string
    can only make the count stricter or looser by its own brackets.
    """
    raw = document.encode("utf-8", "surrogatepass") if isinstance(document, str) else document
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return None  # the fast path: cannot be deeper than it has brackets
    text = _ESCAPE.sub(b"", raw)  # escaped quotes (and backslashes) gone
    depth, opens = _depths(text)
    if not depth.size or int(depth.max()) <= max_depth:
        return None
    field = _field_at(text, depth, opens, max_depth, prefix)
    return field, f"nested deeper than {max_depth} levels"


def _depths(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The nesting depth after each byte of ``text`` (a document without escapes), and
    where arrays and objects open; brackets inside strings do not count."""
    quotes = (np.frombuffer(text, dtype=np.uint8) == _QUOTE).view(np.uint8)
    # inside a string: after an odd number of quotes (a quote's own step is 0); the
    # count wraps at 256, its parity does not
    outside = (np.cumsum(quotes, dtype=np.uint8) & 1) == 0
    steps = np.where(outside, np.frombuffer(text.translate(_STEPS), dtype=np.int8), 0)
    return np.cumsum(steps, dtype=np.int32), steps == 1


def _field_at(text: bytes, depth: np.ndarray, opens: np.ndarray, max_depth: int,
              prefix: str) -> str:
    """The dotted path of the members that hold the first value nested past
    ``max_depth``. The container open at level L there is the last one opened at
    level L before it (to climb past L again, the depth must pass an opener of L)."""
    excess = int(np.argmax(depth > max_depth))
    where = np.nonzero(opens[: excess + 1])[0][::-1]  # openers, the latest first
    _, first = np.unique(depth[where], return_index=True)
    names = []
    for position in where[first][1:]:  # by level (np.unique sorts); level 1: the document
        key = _KEY_BEFORE.search(text, max(0, position - _KEY_WINDOW), position)
        if key is not None:
            names.append(key.group(1).decode("utf-8", "replace"))
    path = ".".join(([prefix] if prefix else []) + names[:_MAX_NAMES])
    return path or "body"

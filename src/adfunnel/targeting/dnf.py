"""Compilation of a targeting tree to disjunctive normal form (DESIGN.md §The funnel, step 2).

The conjunction index (Whang et al., "Indexing Boolean Expressions", VLDB 2009)
stores every ad's targeting as an OR of conjunctions, each conjunction an AND of
``attribute ∈ set`` / ``attribute ∉ set`` terms. :func:`compile_dnf` produces that
form:

- NOT is pushed down to the leaves with De Morgan's laws:
  ``NOT(a in S) = a not_in S``, ``NOT(a not_in S) = a in S``,
  ``NOT(all[...]) = any[NOT ...]``, ``NOT(any[...]) = all[NOT ...]``.
- AND over ORs is distributed (a cross product); a tree whose DNF would hold more
  than :data:`MAX_CONJUNCTIONS` conjunctions is refused with a
  :class:`~adfunnel.targeting.expr.TargetingError` naming the node where the limit
  was passed, so the campaign API can answer 422 at write time.

Same-attribute terms are merged only where the merge is exact for *multi-valued*
requests too (a request may carry several values of an attribute: ``a in S`` is
true when any value is in S, ``a not_in S`` when none is):

- ``a not_in S ∧ a not_in T`` → ``a not_in S ∪ T``;
- ``a in S ∧ a not_in T`` → ``a in (S − T) ∧ a not_in T`` (unsatisfiable when
  ``S ⊆ T``: the conjunction is dropped);
- ``a in S ∧ a in T`` with ``S ⊆ T`` → ``a in S`` (the wider term is implied);
- ``(a in S) ∨ (a in T)`` as whole conjunctions → ``a in S ∪ T``;
- duplicate conjunctions are removed, and so is any conjunction whose terms are
  a superset of another's (absorption).

``a in S ∧ a in T`` with overlapping, non-nested sets is *not* merged into
``a in S ∩ T``: that is only exact for single-valued requests, and an index must
equal :func:`adfunnel.targeting.evaluate.matches` for every request.

Semantics of a missing attribute are the evaluator's: ``a in S`` is false and
``a not_in S`` is true when the request has no value for ``a``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from adfunnel.targeting.evaluate import RequestAttributes
from adfunnel.targeting.expr import All, Any_, Expr, In, Not, NotIn, TargetingError

#: Most conjunctions one ad's targeting may compile to; more is refused.
MAX_CONJUNCTIONS = 64
#: Most ``∈`` terms in one conjunction (the index packs the term slot in 5 bits).
MAX_IN_TERMS = 32


@dataclass(frozen=True, slots=True)
class Term:
    """``attr ∈ values`` (``negated`` False) or ``attr ∉ values`` (``negated`` True)."""

    attr: str
    values: frozenset[str]
    negated: bool = False

    def matches(self, request: RequestAttributes) -> bool:
        """The evaluator's semantics for this one leaf (missing attribute: ∈ false, ∉ true)."""
        got = request.get(self.attr)
        if self.negated:
            return not got or self.values.isdisjoint(got)
        return bool(got) and not self.values.isdisjoint(got)

    def sort_key(self) -> tuple[bool, str, tuple[str, ...]]:
        return (self.negated, self.attr, tuple(sorted(self.values)))


@dataclass(frozen=True, slots=True)
class Conjunction:
    """An AND of terms in canonical order: ``∈`` terms first, then ``∉``, each by attribute.

    ``size`` is K in Whang et al.: the number of ``∈`` terms. A conjunction of
    size 0 (only ``∉`` terms, or none at all) goes to the index's Z entry.
    """

    terms: tuple[Term, ...]

    @property
    def size(self) -> int:
        return sum(1 for t in self.terms if not t.negated)

    @property
    def in_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if not t.negated)

    @property
    def not_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.negated)

    def matches(self, request: RequestAttributes) -> bool:
        """Every term holds for ``request``."""
        return all(t.matches(request) for t in self.terms)


def compile_dnf(expr: Expr, path: str = "targeting") -> list[Conjunction]:
    """Compile ``expr`` to an equivalent OR of conjunctions (Whang et al., VLDB 2009, §2).

    Returns the conjunctions in a canonical order; an empty list means the
    expression can never match (e.g. ``all[a in {x}, a not_in {x}]``).
    ``any(c.matches(r) for c in compile_dnf(e)) == matches(e, r)`` for every
    request ``r``.

    Raises:
        TargetingError: the DNF would exceed :data:`MAX_CONJUNCTIONS` conjunctions,
            or a conjunction would hold more than :data:`MAX_IN_TERMS` ``∈`` terms;
            ``path`` names the node (``targeting.all[2].any[0]`` style).
    """
    conjs = _dnf(expr, path, negated=False)
    out = [Conjunction(_canonical(c)) for c in conjs]
    if len(out) > 1:
        out.sort(key=lambda c: tuple(t.sort_key() for t in c.terms))
    for c in out:
        if c.size > MAX_IN_TERMS:
            raise TargetingError(
                path, f"a conjunction would hold {c.size} 'in' terms (limit {MAX_IN_TERMS})"
            )
    return out


def _canonical(terms: frozenset[Term]) -> tuple[Term, ...]:
    """Terms in canonical order: ∈ before ∉, by attribute, then by values."""
    out = sorted(terms, key=lambda t: (t.negated, t.attr))
    if any(a.negated == b.negated and a.attr == b.attr for a, b in pairwise(out)):
        out.sort(key=Term.sort_key)  # same-attribute terms: order them by their values
    return tuple(out)


# A conjunction under construction: its terms as a frozenset (order-free, hashable).
_Conj = frozenset[Term]


# A node's path, built lazily (formatted only for an error): the root's name, or
# (parent path, ".not") or (parent path, "all" | "any", child index).
_Path = str | tuple
_LEAVES = (In, NotIn)
_NODES = (All, Any_)


def _path_str(path: _Path) -> str:
    """``targeting.all[2].any[0]`` style text of a lazy path."""
    parts: list[str] = []
    while isinstance(path, tuple):
        if len(path) == 2:
            path, step = path
            parts.append(step)
        else:
            path, op, i = path
            parts.append(f".{op}[{i}]")
    return path + "".join(reversed(parts))


def _dnf(expr: Expr, path: _Path, negated: bool) -> list[_Conj]:
    if isinstance(expr, _LEAVES):
        neg = isinstance(expr, NotIn) != negated
        return [frozenset((Term(expr.attr, expr.values, neg),))]
    if isinstance(expr, Not):
        return _dnf(expr.child, (path, ".not"), not negated)
    if isinstance(expr, _NODES):
        is_all = isinstance(expr, All)
        op = "all" if is_all else "any"
        parts = [_dnf(c, (path, op, i), negated) for i, c in enumerate(expr.children)]
        # AND distributes over the children's ORs; under NOT, ANY becomes ALL.
        if is_all != negated:
            return _product(parts, path)
        return _union(parts, path)
    raise TypeError(f"not a targeting expression: {expr!r}")


def _too_many(path: _Path, n: int | str) -> TargetingError:
    return TargetingError(
        _path_str(path), f"targeting would compile to {n} conjunctions (limit {MAX_CONJUNCTIONS})"
    )


def _product(parts: list[list[_Conj]], path: _Path) -> list[_Conj]:
    if all(len(p) == 1 for p in parts):  # the common case: an AND of terms
        c = _simplify_conj(frozenset().union(*[p[0] for p in parts]))
        return [] if c is None else [c]
    acc: list[_Conj] = [frozenset()]
    for part in parts:
        if len(acc) * len(part) > MAX_CONJUNCTIONS * MAX_CONJUNCTIONS:
            raise _too_many(path, f"more than {MAX_CONJUNCTIONS * MAX_CONJUNCTIONS}")
        combined = (_simplify_conj(a | b) for a in acc for b in part)
        acc = _simplify_or(c for c in combined if c is not None)
        if len(acc) > MAX_CONJUNCTIONS:
            raise _too_many(path, len(acc))
    return acc


def _union(parts: list[list[_Conj]], path: _Path) -> list[_Conj]:
    out = _simplify_or(c for part in parts for c in part)
    if len(out) > MAX_CONJUNCTIONS:
        raise _too_many(path, len(out))
    return out


def _simplify_conj(terms: _Conj) -> _Conj | None:
    """Merge same-attribute terms exactly (see module docstring); None when unsatisfiable."""
    if len({t.attr for t in terms}) == len(terms):  # the common case: one term per attribute
        return terms
    by_attr: dict[str, list[Term]] = {}
    for t in terms:
        by_attr.setdefault(t.attr, []).append(t)
    out: set[Term] = set()
    for attr, ts in by_attr.items():
        excluded: frozenset[str] = frozenset().union(*(t.values for t in ts if t.negated))
        ins = [t.values - excluded for t in ts if not t.negated]
        if any(not s for s in ins):
            return None
        # Drop an ∈ set that contains another ∈ set (the smaller one implies it).
        ins = list(dict.fromkeys(ins))
        kept = [s for s in ins if not any(o < s for o in ins)]
        out.update(Term(attr, s) for s in kept)
        if excluded:
            out.add(Term(attr, excluded, negated=True))
    return frozenset(out)


def _simplify_or(conjs: Iterable[_Conj]) -> list[_Conj]:
    """Dedupe, merge single-``∈``-term conjunctions per attribute, drop absorbed ones."""
    single_in: dict[str, set[str]] = {}
    rest: dict[_Conj, None] = {}
    for c in conjs:
        if not c:
            return [c]  # an empty conjunction is always true: it absorbs everything
        if len(c) == 1:
            (t,) = c
            if not t.negated:
                single_in.setdefault(t.attr, set()).update(t.values)
                continue
        rest[c] = None
    merged = [frozenset({Term(a, frozenset(v))}) for a, v in single_in.items()]
    cands = merged + list(rest)
    if len(cands) > 4 * MAX_CONJUNCTIONS:
        return cands  # too many to absorb cheaply; the caller refuses it anyway
    # Absorption: X ∨ (X ∧ Y) = X. Of two equivalent conjunctions the first is kept.
    return [
        c
        for i, c in enumerate(cands)
        if not any(
            j != i and _implies(c, o) and (j < i or not _implies(o, c)) for j, o in enumerate(cands)
        )
    ]


def _implies(c: _Conj, o: _Conj) -> bool:
    """True when conjunction ``c`` implies conjunction ``o`` (every term of o is implied)."""
    for t in o:
        if t in c:
            continue
        if t.negated:
            if not any(u.negated and u.attr == t.attr and t.values <= u.values for u in c):
                return False
        elif not any((not u.negated) and u.attr == t.attr and u.values <= t.values for u in c):
            return False
    return True

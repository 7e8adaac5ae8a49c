"""The block-list rules of :mod:`adfunnel.targeting.blocks`: the category prefix rule at
the ``-`` boundary, the domain suffix rule at label boundaries, and the canonical forms.
Properties (hypothesis) hold each rule to an independent oracle written as the rule's
English sentence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.targeting.blocks import (
    BlockValueError,
    blocking_category,
    blocking_domain,
    category_keys,
    domain_keys,
    normalise_category,
    normalise_domain,
    request_domain,
)

tier1 = st.integers(1, 30).map(lambda n: f"IAB{n}")
category = st.one_of(tier1, st.tuples(tier1, st.integers(1, 40)).map(lambda t: f"{t[0]}-{t[1]}"))
label = st.sampled_from(["a", "b", "ford", "www", "myford", "cdn", "co"])
domain = st.lists(label, min_size=1, max_size=3).map(lambda ls: ".".join([*ls, "com"]))


def _category_oracle(ad: str, blocked: str) -> bool:
    """A blocked id blocks itself and its subcategories."""
    return ad == blocked or ad.startswith(blocked + "-")


def _domain_oracle(ad: str, blocked: str) -> bool:
    """A blocked domain blocks itself and its sub-domains."""
    return ad == blocked or ad.endswith("." + blocked)


@settings(max_examples=300)
@given(st.lists(category, max_size=4), st.frozensets(category, max_size=4))
def test_category_rule_matches_its_oracle(ads: list[str], blocked: frozenset[str]) -> None:
    """Breaks if the rule is a string prefix (tried: ``category.startswith(b)`` for each
    blocked id: ``IAB7-3`` blocks ``IAB7-39``) or ignores parents (tried:
    ``category_keys`` returning only the id itself)."""
    found = blocking_category(ads, blocked)
    expected = any(_category_oracle(a, b) for a in ads for b in blocked)
    assert (found is not None) is expected
    if found is not None:
        assert found in blocked and any(_category_oracle(a, found) for a in ads)


@settings(max_examples=300)
@given(st.lists(domain, max_size=3), st.frozensets(domain, max_size=4))
def test_domain_rule_matches_its_oracle(ads: list[str], blocked: frozenset[str]) -> None:
    """Breaks if the rule is a string suffix (tried: ``ad.endswith(b)``: ``ford.com``
    blocks ``myford.com``) or exact only (tried: ``domain_keys`` returning the domain
    alone: ``ford.com`` no longer blocks ``www.ford.com``)."""
    found = blocking_domain(ads, blocked)
    expected = any(_domain_oracle(a, b) for a in ads for b in blocked)
    assert (found is not None) is expected


def test_the_examples_of_the_issue() -> None:
    """Breaks as the properties above do, on the issue's own examples."""
    assert blocking_category(["IAB7-39"], frozenset({"IAB7"})) == "IAB7"
    assert blocking_category(["IAB7-39"], frozenset({"IAB7-3"})) is None
    assert blocking_category(["IAB7"], frozenset({"IAB7-39"})) is None  # no upward block
    assert blocking_domain(["www.ford.com"], frozenset({"ford.com"})) == "ford.com"
    assert blocking_domain(["myford.com"], frozenset({"ford.com"})) is None
    assert blocking_domain(["ford.com"], frozenset({"www.ford.com"})) is None
    assert category_keys("IAB7-39") == ("IAB7-39", "IAB7")
    assert domain_keys("a.b.ford.com") == ("a.b.ford.com", "b.ford.com", "ford.com")


@settings(max_examples=200)
@given(st.one_of(category, category.map(str.lower), category.map(lambda c: f" {c}\t")))
def test_normalised_category_is_canonical_and_idempotent(text: str) -> None:
    """Breaks if case or spaces are kept (tried: no ``.upper()``: ``iab7`` refused)."""
    once = normalise_category(text)
    assert once == text.strip().upper() and normalise_category(once) == once


@pytest.mark.parametrize("bad", ["IAB0", "IAB7-0", "IAB", "IAB7-39-1", "IAB07", "food", "",
                                 "IAB 7", 7, None])
def test_malformed_categories_are_refused(bad: object) -> None:
    """Breaks if the form is loosened (tried: ``CATEGORY`` as ``IAB[0-9-]+``)."""
    with pytest.raises(BlockValueError):
        normalise_category(bad)


@settings(max_examples=200)
@given(domain, st.sampled_from(["", ".", "  "]), st.booleans())
def test_normalised_domain_is_lower_case_and_idempotent(name: str, tail: str,
                                                       upper: bool) -> None:
    """Breaks if case or the final dot is kept (tried: no ``.lower()``)."""
    text = (name.upper() if upper else name) + tail
    once = normalise_domain(text)
    assert once == name and normalise_domain(once) == once
    assert request_domain(text) == once  # a request's domain compares the same way


def test_domains_in_idna_form() -> None:
    """Breaks if IDNA is skipped (tried: ``text.lower()`` for every input: the U-label
    is kept and never meets an A-label block)."""
    assert normalise_domain("Bücher.example") == "xn--bcher-kva.example"
    assert normalise_domain("xn--bcher-kva.example") == "xn--bcher-kva.example"


@pytest.mark.parametrize("bad", ["https://ford.com", "ford.com/x", "ford.com:80", "ford",
                                 "10.0.0.1", "a_b.com", "-a.com", "a..com", "", "u@ford.com",
                                 "x" * 64 + ".com", 3])
def test_non_host_names_are_refused(bad: object) -> None:
    """Breaks if the label rule is loosened (tried: the ``isdigit`` check removed:
    ``10.0.0.1`` accepted). Dropping the ``"/:@?# "`` check alone is caught by the label
    rule too (tried: still red-free, so the two rules are redundant by design)."""
    with pytest.raises(BlockValueError):
        normalise_domain(bad)

"""Tier-1 rules on the real lists: each reason, their order, the timing bound."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.billing.model import EventType
from adfunnel.ivt.lists import CrawlerUserAgents, IpRanges
from adfunnel.ivt.reasons import TIER1_REASONS, TIER2_REASONS, Reason
from adfunnel.ivt.rules import (
    CLICK,
    IMPRESSION,
    INVALID,
    VALID,
    EventFacts,
    Tier1Rules,
    Verdict,
)
from adfunnel.settings.ivt import MIN_CLICK_DELAY_MS
from tests.ivt.conftest import CHROME_UA, GOOGLEBOT_UA

T0 = 1_760_000_000_000  # epoch ms
HOME = "81.2.69.142"  # UK broadband, in no list
AWS = "3.5.140.1"
GOOGLEBOT_IP = "66.249.66.1"


@pytest.fixture(scope="module")
def rules(user_agents: CrawlerUserAgents, ranges: IpRanges) -> Tier1Rules:
    return Tier1Rules(user_agents, ranges)


def facts(**kw: object) -> EventFacts:
    base: dict[str, object] = dict(event_type=CLICK, client_ip=HOME, user_agent=CHROME_UA,
                                   served_at_ms=T0, event_at_ms=T0 + 5_000)
    base.update(kw)
    return EventFacts(**base)  # type: ignore[arg-type]


def test_a_person_is_valid(rules: Tier1Rules) -> None:
    assert rules.check(facts()) is VALID
    assert rules.check(facts(event_type=IMPRESSION, event_at_ms=T0 + 10)) is VALID
    assert rules.check(facts(client_ip="2003:c1:1234::1")) is VALID
    assert rules.check(facts(client_ip="104.28.28.1")) is VALID  # iCloud Private Relay


@pytest.mark.parametrize(("change", "reason"), [
    (dict(user_agent=None), Reason.MISSING_UA),
    (dict(user_agent="  "), Reason.MISSING_UA),
    (dict(user_agent=GOOGLEBOT_UA), Reason.CRAWLER_UA),
    (dict(user_agent="python-requests/2.31.0"), Reason.CRAWLER_UA),
    (dict(client_ip="1.2.3"), Reason.BAD_IP),
    (dict(client_ip=""), Reason.BAD_IP),
    (dict(client_ip=GOOGLEBOT_IP), Reason.CRAWLER_IP),
    (dict(client_ip="2001:4860:4801:2::1"), Reason.CRAWLER_IP),
    (dict(client_ip=AWS), Reason.DATACENTER_IP),
    (dict(client_ip="2600:1f18::1"), Reason.DATACENTER_IP),
    (dict(client_ip="::ffff:3.5.140.1"), Reason.DATACENTER_IP),
    (dict(event_at_ms=T0 + 100), Reason.IMPOSSIBLE_TIMING),
])
def test_each_reason(rules: Tier1Rules, change: dict[str, object], reason: Reason) -> None:
    verdict = rules.check(facts(**change))
    assert verdict == Verdict(False, reason) and verdict is INVALID[reason]


def test_a_verified_crawler_is_still_invalid(rules: Tier1Rules) -> None:
    """Googlebot from Google's own Googlebot range is a real crawler: never billed."""
    assert rules.check(facts(user_agent=GOOGLEBOT_UA, client_ip=GOOGLEBOT_IP)).reason is (
        Reason.CRAWLER_UA)
    # a browser user agent from a Googlebot address: still the crawler
    assert rules.check(facts(client_ip=GOOGLEBOT_IP)).reason is Reason.CRAWLER_IP


def test_first_failing_check_names_the_verdict(rules: Tier1Rules) -> None:
    everything = dict(user_agent=GOOGLEBOT_UA, client_ip="bad", event_at_ms=T0)
    assert rules.check(facts(**everything)).reason is Reason.CRAWLER_UA
    assert rules.check(facts(**{**everything, "user_agent": None})).reason is (
        Reason.MISSING_UA)
    assert rules.check(facts(**{**everything, "user_agent": CHROME_UA})).reason is (
        Reason.BAD_IP)
    assert rules.check(facts(client_ip=AWS, event_at_ms=T0)).reason is Reason.DATACENTER_IP


def test_timing_bound(rules: Tier1Rules) -> None:
    at = T0 + MIN_CLICK_DELAY_MS
    assert rules.check(facts(event_at_ms=at)) is VALID
    assert rules.check(facts(event_at_ms=at - 1)).reason is Reason.IMPOSSIBLE_TIMING
    assert rules.check(facts(event_at_ms=T0 - 1_000)).reason is Reason.IMPOSSIBLE_TIMING
    # the impression time, when known, is the start
    late = T0 + 60_000
    assert rules.check(facts(impression_at_ms=late, event_at_ms=late + 200)).reason is (
        Reason.IMPOSSIBLE_TIMING)
    assert rules.check(facts(impression_at_ms=late, event_at_ms=late + 900)) is VALID
    # impressions are never too soon
    assert rules.check(facts(event_type=IMPRESSION, event_at_ms=T0)) is VALID
    # the billing enum's members work as event types
    assert rules.check(facts(event_type=EventType.CLICK, event_at_ms=T0)).reason is (
        Reason.IMPOSSIBLE_TIMING)
    strict = Tier1Rules(rules.user_agents, rules.ranges, min_click_delay_ms=2_000)
    assert strict.check(facts(event_at_ms=T0 + 1_500)).reason is Reason.IMPOSSIBLE_TIMING
    # 0 is a valid bound (>= 0): only a click before its serve is too soon
    none = Tier1Rules(rules.user_agents, rules.ranges, min_click_delay_ms=0)
    assert none.check(facts(event_at_ms=T0)) is VALID
    assert none.check(facts(event_at_ms=T0 - 1)).reason is Reason.IMPOSSIBLE_TIMING


def test_verdict_invariant_and_arguments(rules: Tier1Rules) -> None:
    with pytest.raises(ValueError, match="valid=True"):
        Verdict(True, Reason.BAD_IP)
    with pytest.raises(ValueError, match="valid=False"):
        Verdict(False)
    with pytest.raises(ValueError, match="min_click_delay_ms"):
        Tier1Rules(rules.user_agents, rules.ranges, min_click_delay_ms=-1)
    assert TIER1_REASONS.isdisjoint(TIER2_REASONS)
    assert set(Reason) == TIER1_REASONS | TIER2_REASONS
    assert {r.value for r in TIER2_REASONS} == {
        "click_rate", "impression_rate", "ctr_outlier", "timing"}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.sampled_from([CLICK, IMPRESSION, "conversion"]),
       st.one_of(st.none(), st.text(max_size=80), st.sampled_from([CHROME_UA, GOOGLEBOT_UA])),
       st.one_of(st.text(max_size=40), st.ip_addresses().map(str)),
       st.integers(-10**13, 10**13), st.integers(-10**6, 10**7),
       st.one_of(st.none(), st.integers(-10**6, 10**7)))
def test_check_is_total_and_pure(rules: Tier1Rules, kind: str, ua: str | None, ip: str,
                                 served: int, delay: int, imp_delay: int | None) -> None:
    event = EventFacts(kind, ip, ua, served, served + delay,
                       None if imp_delay is None else served + imp_delay)
    verdict = rules.check(event)
    assert verdict.valid == (verdict.reason is None)
    assert verdict.reason is None or verdict.reason in TIER1_REASONS
    assert rules.check(dataclasses.replace(event)) == verdict

"""Tier-2 scoring: rate limits, CTR outliers, timing, dedupe, determinism, memory."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adfunnel.ivt.lists import CrawlerUserAgents, IpRanges
from adfunnel.ivt.reasons import Reason
from adfunnel.ivt.rules import CLICK, IMPRESSION, EventFacts, Tier1Rules
from adfunnel.ivt.scoring import Reversal, Tier2Scorer
from adfunnel.settings.ivt import (
    CLICK_RATE_LIMITS,
    CTR_OUTLIER_MIN_IMPRESSIONS,
    DAY_MS,
    HOUR_MS,
    IMPRESSION_RATE_LIMIT,
    MINUTE_MS,
    PAIRING_MEMORY_MS,
    RateLimit,
    Tier2Config,
)
from tests.ivt.conftest import CHROME_UA

T0 = 1_760_000_000_000
HOME = "81.2.69.142"
_ids = itertools.count()


def impression(at: int, ip: str = HOME, iid: str | None = None, placement: str = "top",
               user: str | None = "u1") -> EventFacts:
    return EventFacts(IMPRESSION, ip, CHROME_UA, at - 100, at,
                      impression_id=iid or f"i{next(_ids)}", user_key=user, placement=placement)


def click(at: int, ip: str = HOME, iid: str | None = None, placement: str = "top",
          user: str | None = "u1", impression_at: int | None = None) -> EventFacts:
    return EventFacts(CLICK, ip, CHROME_UA, at - 60_000, at, impression_at,
                      impression_id=iid or f"i{next(_ids)}", user_key=user, placement=placement)


def reasons(reversals: list[Reversal]) -> list[Reason]:
    return [r.reason for r in reversals]


def only_clicks(limits: tuple[RateLimit, ...]) -> Tier2Config:
    return Tier2Config(click_limits=limits)


# --- click rate ----------------------------------------------------------------------


def test_ethicalads_limits_by_default() -> None:
    assert [(r.limit, r.window_ms) for r in CLICK_RATE_LIMITS] == [
        (1, 60_000), (3, 600_000), (10, 3_600_000), (25, 86_400_000)]
    scorer = Tier2Scorer()
    assert scorer.observe(click(T0)) == []
    second = scorer.observe(click(T0 + 30_000))
    assert reasons(second) == [Reason.CLICK_RATE]
    assert second[0].detail == "2 clicks in (t-60000ms, t] > 1"
    # another user behind the same address has a budget of its own
    assert scorer.observe(click(T0 + 30_000, user="u2")) == []
    # a minute after the first click the minute window holds it no more, but the
    # rejected one still counts: 2 in the last minute
    assert reasons(scorer.observe(click(T0 + 60_000))) == [Reason.CLICK_RATE]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 10 * MINUTE_MS), st.integers(2, 20), st.data())
def test_more_than_limit_clicks_in_a_window_are_flagged(limit: int, window: int, n: int,
                                                        data: st.DataObject) -> None:
    """N clicks inside one window: exactly those after the first ``limit`` are flagged."""
    offsets = sorted(data.draw(st.lists(st.integers(0, window - 1), min_size=n, max_size=n)))
    scorer = Tier2Scorer(only_clicks((RateLimit(limit, window),)))
    flagged = [bool(scorer.observe(click(T0 + o))) for o in offsets]
    assert flagged == [i >= limit for i in range(n)]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 10 * MINUTE_MS), st.integers(2, 30), st.data())
def test_clicks_spaced_beyond_the_window_are_not(limit: int, window: int, n: int,
                                                 data: st.DataObject) -> None:
    gaps = data.draw(st.lists(st.integers(window, 2 * window), min_size=n, max_size=n))
    scorer = Tier2Scorer(only_clicks((RateLimit(limit, window),)))
    at = T0
    for gap in gaps:
        at += gap
        assert scorer.observe(click(at)) == []


def test_default_limits_allow_one_click_a_day_forever() -> None:
    scorer = Tier2Scorer()
    assert scorer.score(click(T0 + d * DAY_MS) for d in range(40)) == []


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2 * DAY_MS), min_size=1, max_size=60))
def test_default_limits_match_a_brute_force_count(offsets: list[int]) -> None:
    """Every click, flagged or not, counts toward the windows; a click is flagged when
    any window ending at it holds more than its limit."""
    offsets.sort()
    scorer = Tier2Scorer()
    for i, o in enumerate(offsets):
        expected = any(
            sum(1 for p in offsets[: i + 1] if o - r.window_ms < p <= o) > r.limit
            for r in CLICK_RATE_LIMITS)
        got = scorer.observe(click(T0 + o))
        assert bool(got) == expected
        assert all(r.reason is Reason.CLICK_RATE for r in got)


# --- impressions and CTR -------------------------------------------------------------


def test_impression_rate_per_ip() -> None:
    limit = IMPRESSION_RATE_LIMIT.limit
    scorer = Tier2Scorer()
    spacing = MINUTE_MS // (limit + 1)
    out = scorer.score(impression(T0 + i * spacing) for i in range(limit + 1))
    assert len(out) == 1 and out[0].reason is Reason.IMPRESSION_RATE
    assert out[0].event_type == IMPRESSION and out[0].at_ms == T0 + limit * spacing
    # the same address written as IPv4-mapped IPv6 is the same key
    assert reasons(scorer.observe(impression(T0 + limit * spacing, ip="::ffff:" + HOME))) == [
        Reason.IMPRESSION_RATE]
    # another address is not affected; a minute later the first is clean again
    assert scorer.observe(impression(T0 + limit * spacing, ip="90.0.0.1")) == []
    assert scorer.observe(impression(T0 + limit * spacing + MINUTE_MS)) == []


def test_ctr_outlier_per_ip_and_placement() -> None:
    scorer = Tier2Scorer()
    n = CTR_OUTLIER_MIN_IMPRESSIONS
    assert scorer.score(impression(T0 + i * 1_000) for i in range(n)) == []
    # distinct users (no click-rate limit trips), spread over 20 minutes
    at = T0 + 60_000
    for k in range(5):  # 5 / 20 = 25 %: not over the bar
        assert scorer.observe(click(at + k * 4 * MINUTE_MS, user=f"v{k}")) == []
    sixth = scorer.observe(click(at + 20 * MINUTE_MS, user="v5"))
    assert reasons(sixth) == [Reason.CTR_OUTLIER]
    assert sixth[0].detail == "6 clicks / 20 impressions on 'top' > 25%"
    # the same IP on another placement, and another IP on this one, are judged apart
    assert scorer.observe(click(at + 20 * MINUTE_MS, user="v6", placement="side")) == []
    assert scorer.observe(click(at + 20 * MINUTE_MS, user="v7", ip="90.0.0.1")) == []


def test_ctr_needs_the_minimum_volume() -> None:
    scorer = Tier2Scorer()
    scorer.score(impression(T0 + i) for i in range(CTR_OUTLIER_MIN_IMPRESSIONS - 1))
    for k in range(8):  # CTR far over 25 %, but under the minimum volume
        assert scorer.observe(click(T0 + 60_000 + k * 5 * MINUTE_MS, user=f"v{k}")) == []


# --- timing --------------------------------------------------------------------------


def test_click_too_soon_after_its_impression() -> None:
    scorer = Tier2Scorer()
    assert scorer.observe(impression(T0, iid="a")) == []
    out = scorer.observe(click(T0 + 300, iid="a"))
    assert out == [Reversal("a", CLICK, Reason.TIMING, T0 + 300,
                            "click 300ms after its impression < 500ms")]
    assert scorer.observe(impression(T0 + DAY_MS, iid="b")) == []
    assert scorer.observe(click(T0 + DAY_MS + 2_000, iid="b")) == []


def test_a_click_exactly_the_minimum_delay_after_its_impression_is_not_too_soon() -> None:
    scorer = Tier2Scorer()
    assert scorer.observe(impression(T0, iid="a")) == []
    assert scorer.observe(click(T0 + 500, iid="a")) == []


def test_a_click_reversed_before_its_impression_is_not_reversed_again() -> None:
    """Two clicks in a minute: the second is over the 1-per-minute limit; its impression,
    arriving later and 50 ms before it, adds no second (timing) reversal."""
    scorer = Tier2Scorer()
    assert scorer.observe(click(T0 + 100, iid="x")) == []
    assert reasons(scorer.observe(click(T0 + 200, iid="a"))) == [Reason.CLICK_RATE]
    assert scorer.observe(impression(T0 + 150, iid="a")) == []


def test_a_click_seen_before_its_impression_is_judged_when_it_arrives() -> None:
    scorer = Tier2Scorer()
    assert scorer.observe(click(T0 + 200, iid="a")) == []
    out = scorer.observe(impression(T0, iid="a"))
    assert out == [Reversal("a", CLICK, Reason.TIMING, T0 + 200,
                            "click 200ms after its impression < 500ms")]
    # a plausible delay passes either way round
    assert scorer.observe(click(T0 + DAY_MS + 3_000, iid="b")) == []
    assert scorer.observe(impression(T0 + DAY_MS, iid="b")) == []


def test_a_scripts_fixed_delay_is_caught() -> None:
    scorer = Tier2Scorer()
    at, out = T0, []
    for k in range(5):
        at += 11 * MINUTE_MS  # under every click-rate limit
        scorer.observe(impression(at, iid=f"r{k}"))
        out.append(scorer.observe(click(at + 1_000 + k * 3, iid=f"r{k}")))
    assert out[:4] == [[], [], [], []]
    assert reasons(out[4]) == [Reason.TIMING]
    assert out[4][0].detail == "last 5 click delays within 12ms <= 20ms"


def test_delays_spread_exactly_the_regular_spread_are_regular() -> None:
    scorer = Tier2Scorer()
    at, out = T0, []
    for k in range(5):  # delays 1_000, 1_005, ..., 1_020: a spread of exactly 20 ms
        at += 11 * MINUTE_MS
        scorer.observe(impression(at, iid=f"s{k}"))
        out.append(scorer.observe(click(at + 1_000 + k * 5, iid=f"s{k}")))
    assert out[:4] == [[], [], [], []]
    assert out[4][0].detail == "last 5 click delays within 20ms <= 20ms"


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(600, 60_000), min_size=5, max_size=12, unique=True))
def test_human_delays_are_not_regular(delays: list[int]) -> None:
    """Delays at least 21 ms apart (so any 5 spread over 84 ms) are never called regular."""
    delays = sorted(delays)
    if any(b - a <= 20 for a, b in itertools.pairwise(delays)):
        return
    scorer = Tier2Scorer()
    at = T0
    for k, delay in enumerate(delays):
        at += 11 * MINUTE_MS
        scorer.observe(impression(at, iid=f"h{k}"))
        assert scorer.observe(click(at + delay, iid=f"h{k}")) == []


# --- dedupe, tier 1, determinism, memory ----------------------------------------------


def test_a_repeated_event_is_ignored() -> None:
    scorer = Tier2Scorer()
    first = click(T0, iid="a")
    assert scorer.observe(first) == []
    assert scorer.observe(first) == []  # a redelivery: not a second click
    assert scorer.observe(click(T0 + 61_000)) == []
    imp = impression(T0 + 62_000, iid="b")
    assert scorer.observe(imp) == [] and scorer.observe(imp) == []
    assert scorer.memory()["impression_times"] == 1


def test_tier1_rules_rerun_first(user_agents: CrawlerUserAgents, ranges: IpRanges) -> None:
    scorer = Tier2Scorer(tier1=Tier1Rules(user_agents, ranges))
    out = scorer.observe(click(T0, ip="3.5.140.1", iid="dc"))
    assert out == [Reversal("dc", CLICK, Reason.DATACENTER_IP, T0, "tier 1")]
    conversion = EventFacts("conversion", "66.249.66.1", CHROME_UA, T0, T0 + 9_000,
                            impression_id="cv")
    assert reasons(scorer.observe(conversion)) == [Reason.CRAWLER_IP]
    # the flagged click still counts toward its key's windows
    assert reasons(scorer.observe(click(T0 + 1_000, ip="3.5.140.1"))) == [Reason.DATACENTER_IP]


EVENTS = st.lists(
    st.tuples(st.sampled_from([IMPRESSION, CLICK]), st.integers(0, 3 * MINUTE_MS),
              st.sampled_from([HOME, "90.0.0.1", "2003:c1::1", "not-an-ip"]),
              st.sampled_from(["u1", "u2", None]), st.sampled_from(["top", "side"]),
              st.integers(0, 30)),
    max_size=120)


def _facts(rows: list[tuple[str, int, str, str | None, str, int]]) -> list[EventFacts]:
    return [EventFacts(kind, ip, CHROME_UA, T0 + at - 500, T0 + at, impression_id=f"x{iid}",
                       user_key=user, placement=placement)
            for kind, at, ip, user, placement, iid in rows]


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(EVENTS)
def test_deterministic(rows: list[tuple[str, int, str, str | None, str, int]]) -> None:
    events = _facts(rows)
    assert Tier2Scorer().score(events) == Tier2Scorer().score(events)


@settings(max_examples=50, deadline=None)
@given(EVENTS)
def test_memory_is_released_once_time_moves_past_every_window(
        rows: list[tuple[str, int, str, str | None, str, int]]) -> None:
    scorer = Tier2Scorer()
    scorer.score(_facts(sorted(rows, key=lambda r: r[1])))
    scorer.advance(T0 + 3 * MINUTE_MS + DAY_MS)
    assert set(scorer.memory().values()) == {0}


@pytest.mark.slow
def test_memory_stays_bounded_under_a_flood() -> None:
    """A week of one click and three impressions a second from 50 addresses: memory
    tracks only the live windows, never the event count."""
    scorer = Tier2Scorer()
    peak: dict[str, int] = {}
    step = 1_000
    for i in range(7 * DAY_MS // step // 60):  # one sample a minute of the week
        at = T0 + i * 60 * step
        ip = f"81.2.{i % 50}.1"
        scorer.observe(click(at, ip=ip, iid=f"c{i}"))
        for j in range(3):
            scorer.observe(impression(at + j, ip=ip, iid=f"m{i}.{j}"))
        for name, value in scorer.memory().items():
            peak[name] = max(peak.get(name, 0), value)
    cap = max(r.limit for r in CLICK_RATE_LIMITS) + 1
    assert peak["click_keys"] <= 50 and peak["click_times"] <= 50 * cap
    assert peak["impression_times"] <= 50 * (IMPRESSION_RATE_LIMIT.limit + 1)
    assert peak["ctr_buckets"] <= 50 * 13
    assert peak["pairing"] <= 2 * (PAIRING_MEMORY_MS // 60_000 + 1) * 4


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="click_limits"):
        Tier2Config(click_limits=())
    with pytest.raises(ValueError, match="ctr_bucket_ms"):
        Tier2Config(ctr_bucket_ms=7 * MINUTE_MS)
    with pytest.raises(ValueError, match="regular_clicks"):
        Tier2Config(regular_clicks=1)
    with pytest.raises(ValueError, match="window_ms"):
        RateLimit(1, 0)


# --- rate rules count per viewer; thresholds are settings ------------------------------


def test_people_behind_one_address_do_not_share_the_impression_rate() -> None:
    """122 real-looking impressions from one address in a minute (61 people behind a
    carrier NAT, two impressions each) are all billed: the rule counts per viewer
    (address, user agent, user key), where it used to reverse 62 of them."""
    scorer = Tier2Scorer()
    spacing = MINUTE_MS // 122
    out = scorer.score(impression(T0 + i * spacing, user=f"person-{i % 61}")
                       for i in range(122))
    assert out == []
    # one viewer past the limit is still reversed, whatever the others do
    limit = IMPRESSION_RATE_LIMIT.limit
    own = scorer.score(impression(T0 + i, user="script") for i in range(limit + 1))
    assert reasons(own) == [Reason.IMPRESSION_RATE]


def test_clicks_without_a_user_key_are_told_apart_by_user_agent() -> None:
    scorer = Tier2Scorer(only_clicks((RateLimit(1, MINUTE_MS),)))
    first = EventFacts(CLICK, HOME, CHROME_UA, T0 - 60_000, T0, impression_id="a")
    other = EventFacts(CLICK, HOME, "Mozilla/5.0 (iPhone) Safari/604.1", T0 - 60_000, T0 + 1,
                       impression_id="b")
    assert scorer.observe(first) == [] and scorer.observe(other) == []
    again = EventFacts(CLICK, HOME, CHROME_UA, T0 - 60_000, T0 + 2, impression_id="c")
    assert reasons(scorer.observe(again)) == [Reason.CLICK_RATE]


def test_every_threshold_is_a_setting() -> None:
    from adfunnel.settings import SettingsError, load_settings

    assert Tier2Config.from_settings(load_settings()) == Tier2Config()  # defaults agree
    config = Tier2Config.from_settings(load_settings(
        ivt_impression_rate_limit=200, ivt_impression_rate_window_s=120,
        ivt_click_rate_limits=["2/60", "5/3600"], ivt_ctr_min_impressions=50,
        ivt_ctr_max_percent=10, ivt_regular_clicks=8, ivt_regular_spread_ms=5,
        ivt_min_click_delay_ms=300))
    assert config.impression_limit == RateLimit(200, 2 * MINUTE_MS)
    assert config.click_limits == (RateLimit(2, MINUTE_MS), RateLimit(5, HOUR_MS))
    assert (config.ctr_min_impressions, config.ctr_max_percent, config.regular_clicks,
            config.regular_spread_ms, config.min_click_delay_ms) == (50, 10, 8, 5, 300)
    scorer = Tier2Scorer(config)  # a shared address's 150 a minute pass at 200 / 2 min
    assert scorer.score(impression(T0 + i * 100) for i in range(150)) == []
    with pytest.raises(SettingsError) as refused:
        load_settings(ivt_click_rate_limits=["3 per minute"], ivt_ctr_bucket_s=0,
                      ivt_impression_rate_limit=0)
    named = {p.split(":")[0] for p in refused.value.problems}
    assert named == {"ivt_click_rate_limits", "ivt_ctr_bucket_s", "ivt_impression_rate_limit"}
    with pytest.raises(SettingsError, match="ivt_ctr_bucket_s must divide"):
        load_settings(ivt_ctr_bucket_s=7 * 60)

"""1,000 concurrent decisions while 50 campaigns are created, edited and paused: no
decision raises, no paused campaign is placed, and every placed ad matched the targeting
of a version of its campaign (the index version a decision read may be one edit behind
the campaign record, never a mix of two)."""

from __future__ import annotations

import json
import random
import threading
from datetime import UTC, date, datetime

import pytest

from adfunnel.campaigns.model import BidType, CampaignStatus, Objective
from adfunnel.clock import FixedClock, monotonic_ms
from adfunnel.runtime.embedded import build_runtime
from adfunnel.serving.request import decode_request
from adfunnel.settings import load_settings
from adfunnel.targeting import matches, parse_expr

COUNTRIES = ["US", "CA", "DE", "FR"]


def _request(rng: random.Random) -> bytes:
    return json.dumps({
        "user": {"key": f"u{rng.randrange(100)}",
                 "attributes": {"geo.country": rng.choice(COUNTRIES)}},
        "placement": {"id": "feed"},
        "slots": [{"id": "s1", "position": 1, "width": 300, "height": 250},
                  {"id": "s2", "position": 2, "width": 300, "height": 250}],
    }).encode()


@pytest.mark.slow
def test_decisions_during_campaign_writes(tmp_path) -> None:
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
                             token_secret="k" * 32)
    rt = build_runtime(settings, FixedClock(datetime(2026, 7, 15, 12, tzinfo=UTC)), seed=3)
    errors: list[BaseException] = []
    placed = 0
    versions: dict[int, list[dict]] = {}  # campaign id -> every targeting it ever had
    done = threading.Event()
    lock = threading.Lock()

    def decide(n: int) -> None:
        nonlocal placed
        rng = random.Random(n)
        try:
            i = 0
            while i < 250 or not done.is_set():  # at least 1,000 decisions in all
                i += 1
                req = decode_request(_request(rng))
                d = rt.decider.decide(req, f"{n}-{i}", monotonic_ms() + 1_000)
                country = req.user.attributes["geo.country"]
                for p in d.placed:
                    seen = versions[p.campaign.id]
                    request = {"geo.country": frozenset({country})}
                    assert any(matches(parse_expr(t), request) for t in list(seen))
                    assert p.campaign.status is CampaignStatus.ACTIVE
                with lock:
                    placed += len(d.placed)
        except BaseException as exc:
            errors.append(exc)

    def write() -> None:
        rng = random.Random(99)
        try:
            adv = rt.store.create_advertiser("a").id
            for k in range(50):
                first = {"attr": "geo.country", "in": [rng.choice(COUNTRIES)]}
                new = {"attr": "geo.country", "in": rng.sample(COUNTRIES, 2)}
                c = rt.store.create_campaign(
                    advertiser_id=adv if k % 2 else rt.store.create_advertiser(f"b{k}").id,
                    name=f"c{k}", objective=Objective.IMPRESSIONS, bid_type=BidType.CPM,
                    bid_micros=1_000_000 + k, daily_budget_micros=10**12, time_zone="UTC",
                    flight_start=date(2026, 1, 1),
                    targeting=json.dumps(first),
                )
                versions[c.id] = [first]
                rt.store.create_ad(campaign_id=c.id, landing_url="https://x.test/",
                                   creative_ref="c", format="banner", width=300, height=250)
                versions[c.id].append(new)  # known before the edit commits
                rt.store.update_campaign(c.id, {"targeting": json.dumps(new)})
                if k % 3 == 0:
                    rt.store.update_campaign(c.id, {"status": CampaignStatus.PAUSED})
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=write))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rt.close()
    assert not errors, errors[0]
    assert placed > 0
    assert rt.decisions.decisions == 0  # decided directly, not through the HTTP log

"""Differential test of block lists (#28): the columnar decider against the reference
path over the random worlds of :mod:`tests.serving.test_columnar_differential`, with ads
that declare categories, advertiser domains and apps (applied as change records, so the
catalogue's block book is updated in place, keys dropped and added) and requests that
block some of them: same winners, prices and reason tallies, ``blocked`` among them. An
ad that declares no ``adomain`` is judged by its landing URL's host."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest

from adfunnel.campaigns.model import Ad, ChangeRecord
from adfunnel.clock import monotonic_ms
from adfunnel.serving.decision import BLOCKED
from tests.serving.test_columnar_differential import (
    World,
    _gate_effects,
    _outcome,
    _request,
    _split,
)

CATEGORIES = ["IAB1", "IAB1-2", "IAB7", "IAB7-3", "IAB7-39", "IAB25", "IAB25-1"]
DOMAINS = ["ford.com", "www.ford.com", "myford.com", "a.b.ford.com", "gm.com"]
APPS = ["com.a.game", "com.b.news", "123456"]
# landing URLs: a sub-domain of a blocked one, a blocked one, an address, an IDN host
# (blocked in its A-label form), an allowed one
LANDINGS = ["https://shop.ford.com/p?a=1", "https://GM.com/", "https://192.0.2.1/a",
            "https://bücher.example/", "https://x.test/"]
# what requests block: some as ads declare them, some in another case or form, some junk
BLOCKED_CATEGORIES = ["IAB7", "iab7-3", "IAB1-2", "IAB25", "483", "IAB7-39"]
BLOCKED_DOMAINS = ["ford.com", "WWW.Ford.com", "gm.com.", "ford", "myford.com",
                   "xn--bcher-kva.example", "192.0.2.1"]
BLOCKED_APPS = ["com.a.game", "COM.B.NEWS", "123456"]
_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _declare(rng: random.Random, ad: Ad) -> Ad:
    """``ad`` one version on, declaring random block fields (some none at all)."""
    if rng.random() < 0.3:
        return replace(ad, version=ad.version + 1, landing_url=rng.choice(LANDINGS))
    return replace(ad, version=ad.version + 1, landing_url=rng.choice(LANDINGS),
                   categories=tuple(rng.sample(CATEGORIES, rng.randint(0, 2))),
                   adomain=tuple(rng.sample(DOMAINS, rng.randint(0, 2))),
                   bundle=rng.choice([None, None, *APPS]))


def _redeclare(world: World, seed: int, rounds: int) -> None:
    """Give the world's ads block fields, ``rounds`` times (later rounds change keys)."""
    rng = random.Random(seed)
    seq = 1
    for _ in range(rounds):
        for ad in list(world.catalog.ads.values()):
            new = _declare(rng, ad)
            world.catalog.apply(ChangeRecord(seq, "ad", new.id, new.version, new, _AT))
            seq += 1


def _block(rng: random.Random, req: object) -> None:
    req.blocked_categories = rng.sample(BLOCKED_CATEGORIES, rng.randint(0, 3))  # type: ignore[attr-defined]
    req.blocked_domains = rng.sample(BLOCKED_DOMAINS, rng.randint(0, 2))  # type: ignore[attr-defined]
    req.blocked_apps = rng.sample(BLOCKED_APPS, rng.randint(0, 1))  # type: ignore[attr-defined]


def _blocked_by_oracle(ad: Ad, req: object) -> bool:
    """The rules in words: a blocked id blocks itself and its subcategories, a blocked
    domain itself and its sub-domains (case-insensitively), a blocked app its bundle."""
    cats = [c.upper() for c in req.blocked_categories]  # type: ignore[attr-defined]
    doms = [d.lower().rstrip(".") for d in req.blocked_domains]  # type: ignore[attr-defined]
    host = urlsplit(ad.landing_url).hostname or ""  # lower case
    mine = ad.adomain or (host.encode("idna").decode(),)
    return (any(c == b or c.startswith(b + "-") for c in ad.categories for b in cats)
            or any(d == b or d.endswith("." + b) for d in mine for b in doms)
            or ad.bundle in req.blocked_apps)  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("gate_kind", ["local", "client"])
@pytest.mark.parametrize("keep", [1, 200])
def test_block_lists_agree_on_both_paths(gate_kind: str, keep: int) -> None:
    """Breaks if either path skips a rule or counts it apart (tried: ``drop_blocked``
    call removed from the columnar filter: blocked ads win there; the reference's
    ``blocks.detail`` check removed: the tallies differ; ``ad_keys`` filing categories
    without their parents: ``IAB7`` no longer blocks ``IAB7-39`` on the columnar path;
    ``BlockBook.put`` keeping an ad's old keys: the columnar path blocks what the ad no
    longer declares; ``ad_domains`` answering ``adomain`` only, the landing host
    ignored: an ad landing on ``shop.ford.com`` wins under ``badv`` ``ford.com``)."""
    reasons: Counter[str] = Counter()
    won = 0
    for world_seed in range(18):
        index = ("scan", "conjunction", "shaped")[world_seed % 3]
        ref_world, col_world = (World(world_seed, gate_kind, index, direct=world_seed % 2 == 0)
                                for _ in range(2))
        for w in (ref_world, col_world):
            _redeclare(w, world_seed, rounds=2)
        ref = ref_world.decider(columnar=False, decision_seed=world_seed, keep=keep)
        col = col_world.decider(columnar=True, decision_seed=world_seed, keep=keep)
        rng = random.Random(2000 + world_seed)
        for i in range(15):
            req = _request(rng, i)
            _block(rng, req)
            deadline = monotonic_ms() + 60_000
            a = ref.decide(req, f"r{i}", deadline)
            b = col.decide(req, f"r{i}", deadline)
            where = f"world {world_seed}, request {i}"
            assert _outcome(b) == _outcome(a), where
            assert b.reason_counts is not None
            assert _split(b.reason_counts) == _split(a.rejection_counts()), where
            reasons.update(b.reason_counts)
            won += len(b.placed)
            for p in b.placed:  # the served ad declares nothing the request blocks
                assert not _blocked_by_oracle(p.ad, req), where
        assert _gate_effects(col_world.gate) == _gate_effects(ref_world.gate)
    assert reasons[BLOCKED] > 0 and won > 0, (reasons, won)  # not vacuous

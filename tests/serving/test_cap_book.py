"""The catalogue's side of frequency caps (:class:`CapBook`): advertiser-level caps that
many campaigns declare alike cost one plan, and every distinct declaration still holds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime

from adfunnel.campaigns.model import (
    BidType,
    Campaign,
    CapLevel,
    CapWindow,
    FrequencyCap,
    Objective,
)
from adfunnel.frequency.windows import CapCheck
from adfunnel.serving.caps import CapBook

AT = datetime(2026, 11, 1, 4, 30, tzinfo=UTC)
DAY_3 = (FrequencyCap.counter(3, CapWindow.DAY, CapLevel.ADVERTISER),)


def _campaigns(n: int, caps: tuple[FrequencyCap, ...], *, advertiser: int = 7,
               zone: str = "UTC", first: int = 1) -> list[Campaign]:
    return [Campaign(cid, advertiser, f"c{cid}", Objective.IMPRESSIONS, BidType.CPM, 1_000,
                     10**9, zone, date(2026, 1, 1), frequency_caps=caps)
            for cid in range(first, first + n)]


def test_many_campaigns_declaring_one_advertiser_cap_plan_as_one(monkeypatch) -> None:
    one, many = CapBook(), CapBook()
    one.put(_campaigns(1, DAY_3))
    crowd = _campaigns(2_000, DAY_3)
    many.put(crowd)
    # the plan resolves each distinct declaration once, not once per declaring campaign
    from adfunnel.serving import caps as caps_module

    calls: list[int] = []
    real = caps_module.plan_caps

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(caps_module, "plan_caps", counting)
    assert many.plan(11, crowd[0], AT) == one.plan(11, crowd[0], AT)
    assert len(calls) == 4  # own caps (none) + one declaration, for each book
    assert many.plan(11, crowd[0], AT) is many.plan(11, crowd[0], AT)  # held for the minute
    assert len(calls) == 4


def test_distinct_declarations_all_hold_and_the_stricter_binds() -> None:
    book = CapBook()
    loose = _campaigns(50, (FrequencyCap.counter(9, CapWindow.DAY, CapLevel.ADVERTISER),))
    strict = _campaigns(1, DAY_3, first=100)
    weekly = _campaigns(1, (FrequencyCap.counter(20, CapWindow.WEEK, CapLevel.ADVERTISER),),
                        first=200)
    book.put([*loose, *strict, *weekly])
    plan = book.plan(11, loose[0], AT)
    limits = {r.field: r.limit for r in plan.rules if isinstance(r, CapCheck)}
    assert limits == {"v:7:d:2026-11-01": 3, "v:7:w:2026-W44": 20}

    book.put([replace(strict[0], frequency_caps=())])  # the strict one drops its cap
    limits = {r.field: r.limit for r in book.plan(11, loose[0], AT).rules}
    assert limits == {"v:7:d:2026-11-01": 9, "v:7:w:2026-W44": 20}

    book.put([replace(c, frequency_caps=()) for c in [*loose, *weekly]])
    assert book.plan(11, loose[0], AT).rules == ()
    assert not book.any()


def test_a_declaration_in_another_zone_counts_its_own_day() -> None:
    evening = datetime(2026, 11, 1, 20, 0, tzinfo=UTC)  # already Nov 2 in Tokyo
    book = CapBook()
    utc = _campaigns(3, DAY_3)
    tokyo = _campaigns(3, DAY_3, zone="Asia/Tokyo", first=10)
    book.put([*utc, *tokyo])
    fields = sorted(r.field for r in book.plan(11, utc[0], evening).rules)
    assert fields == ["v:7:d:2026-11-01", "v:7:d:2026-11-02"]
    book.put([replace(c, frequency_caps=()) for c in utc])
    assert [r.field for r in book.plan(11, utc[0], evening).rules] == ["v:7:d:2026-11-02"]

"""A decision's record is named by the caller's ``request_id``, so a name is never taken
from the decision that holds it: the first decision of a name keeps it, except that an
explain request's (the operator's, its admin key checked) takes its name over.

A tester found an anonymous select overwriting the operator's audit: an explain request
named ``audit-42`` (``GET /v1/decisions/audit-42``: every candidate's reason), then an
anonymous select named ``audit-42``, and the same GET answered the anonymous decision's
empty record.

Mutation seen red: ``DecisionLog.append`` holding every decision under its name again
(the explain record replaced: ``rejections`` [] where it listed the outranked ad; in the
log alone, the later anonymous decision held)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from adfunnel.auction.gsp import Rejection
from adfunnel.serving.decision import Decision
from adfunnel.serving.decision_log import DecisionLog
from tests.api_keys import ADMIN_HEADERS
from tests.serving.helpers import ad_request, make_campaign

ANONYMOUS = {"authorization": ""}  # the fixture's client sends the admin key otherwise


def test_an_anonymous_select_does_not_replace_the_operators_explain_record(
        client: TestClient) -> None:
    make_campaign(client, bid_micros=3_000_000)
    loser = make_campaign(client, bid_micros=2_000_000)["ad"]["id"]
    body = ad_request(request_id="audit-42", deadline_ms=10_000)
    r = client.post("/v1/ads:select", json={**body, "explain": True}, headers=ADMIN_HEADERS)
    assert r.status_code == 200, r.text
    record = client.get("/v1/decisions/audit-42").json()
    assert [x["ad_id"] for x in record["rejections"]] == [loser]
    r = client.post("/v1/ads:select", json=body, headers=ANONYMOUS)
    assert r.status_code == 200, r.text
    assert r.json()["request_id"] == "audit-42"  # answered as usual
    assert client.get("/v1/decisions/audit-42").json() == record


def _decision(name: str, rejected: int) -> Decision:
    return Decision(name, [], [Rejection(i, 1, "outranked") for i in range(rejected)], 0)


def test_the_first_decision_of_a_name_keeps_it_unless_an_explain_takes_it() -> None:
    log = DecisionLog()
    first = _decision("x", 1)
    log.append(first)
    log.append(_decision("x", 2))  # another caller, no key: the name stays first's
    assert log.get("x") is first
    audit = _decision("x", 3)
    log.append(audit, explain=True)  # the operator's audit: never squatted
    assert log.get("x") is audit
    log.append(_decision("x", 0))
    assert log.get("x") is audit
    again = _decision("x", 4)
    log.append(again, explain=True)  # the operator again: the latest audit
    assert log.get("x") is again
    assert log.decisions == 5 and log.rejections == {"outranked": 10}  # all counted


def test_a_kept_name_holds_its_rejections_only_once() -> None:
    """The rejections held are the held records' (the memory bound counts them)."""
    log = DecisionLog(capacity=2, max_rejections=5)
    log.append(_decision("a", 3))
    for _ in range(10):
        log.append(_decision("a", 3))  # not held: no rejections added
    log.append(_decision("b", 2))
    assert log.get("a") is not None and log.get("b") is not None

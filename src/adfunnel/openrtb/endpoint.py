"""``POST /openrtb2/bid``: an OpenRTB 2.6 bid request in, a ``BidResponse`` or 204 out.

The request is parsed (:mod:`.request`: 400 naming the field), mapped to our ad request
(:mod:`.mapping`), decided on the same funnel as ``/v1/ads:select`` and committed only
in time (:class:`~adfunnel.serving.commit.DecisionRunner`, the one path both take), the
winners repriced as bids before the deadline check (:mod:`.pricing`; each token signed
once, at its bid's price), and answered with markup and notice URLs (:mod:`.markup`,
:mod:`.response`). The deadline is ``tmax`` less the network margin, from the request's
arrival; shed or late: 204.
Every 204 names why in ``x-adfunnel-outcome`` (``no_fill``, ``shed``, ``late``), as select's.

Who may call: open by default (exchanges call bidders without our API keys). With
``openrtb_exchange_keys`` set, the header ``x-openrtb-key`` must hold one of them
(compared in constant time against every key; never logged): 401 without it, 403 with
any other, naming the header. The body limit is ``max_body_bytes`` (413), as for select.
Nothing in a request makes a 5xx but a server not ready (503).
"""

from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import msgspec
from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from adfunnel.budget.gate import fits
from adfunnel.campaigns.model import Ad
from adfunnel.http_errors import error_response
from adfunnel.openrtb.mapping import Mapped, MappingConfig, map_request
from adfunnel.openrtb.markup import ad_markup
from adfunnel.openrtb.native import native_adm
from adfunnel.openrtb.pricing import BILLABLE_EVENT, reprice, spec_price
from adfunnel.openrtb.request import BidRequest, BidRequestError, decode_bid_request
from adfunnel.openrtb.response import Bid, bid_response, no_bid_response
from adfunnel.serving.commit import DECIDED
from adfunnel.serving.deadline import arrival_ms
from adfunnel.serving.decision import Decision
from adfunnel.serving.dry_run import dry_admit
from adfunnel.serving.http import (
    OUTCOME_HEADER,
    Answer,
    ClientGone,
    RawResponse,
    ServingEndpoints,
    read_body,
)
from adfunnel.settings import Settings
from adfunnel.tracking.notices import notice_urls
from adfunnel.tracking.token_claims import TEST_BID

BID_PATH = "/openrtb2/bid"
KEY_HEADER = b"x-openrtb-key"
OPENRTB_OUTCOMES = Counter("adfunnel_openrtb_requests", "OpenRTB bid requests by outcome "
                           "(bid, no_bid, shed, late, refused)", ["outcome"])
_COUNTS = {o: OPENRTB_OUTCOMES.labels(o) for o in ("bid", "no_bid", "shed", "late", "refused")}
_JSON = (b"content-type", b"application/json")
#: 204s name why, as select's do (``x-adfunnel-outcome``): exchanges ignore the header;
#: a load generator or an operator's probe tells no fill from shed or late by it
_NO_CONTENT: dict[str, Answer] = {o: (204, [(OUTCOME_HEADER, o.encode())], b"")
                                  for o in ("no_fill", "shed", "late")}
_log = logging.getLogger("adfunnel.openrtb")


class OpenRtbEndpoint:
    """The bidder route, on the serving endpoints' decider, logs and settings.

    ``keys``: exchange name -> key (empty: open); ``currency``: ours; ``rates``: our
    units per 1 unit of another currency; ``bills_on``: ``burl`` or ``beacon``;
    ``country_of``: an address → alpha-2 country (None: not derived).
    """

    def __init__(self, serving: ServingEndpoints, *, currency: str = "USD",
                 rates: Mapping[str, Any] | None = None, bills_on: str = "burl",
                 keys: Mapping[str, str] | None = None, network_margin_ms: int = 10,
                 has_placement: Callable[[str], bool] = lambda _: False,
                 country_of: Callable[[str], str | None] | None = None,
                 has_shape: Callable[[str, int, int], bool] = lambda *_: True) -> None:
        self.serving = serving
        if not serving.url_prefix:
            _log.warning("public_base_url is not set: OpenRTB bids carry relative notice "
                         "and markup URLs, which an exchange cannot call")
        self.currency = currency
        self.keys = [(name, key.encode()) for name, key in (keys or {}).items()]
        self.billable_event = BILLABLE_EVENT[bills_on]
        self.config = MappingConfig(currency=currency, rates=dict(rates or {}),
                                    max_slots=serving.max_slots,
                                    network_margin_ms=network_margin_ms,
                                    has_placement=has_placement, country_of=country_of,
                                    has_shape=has_shape)

    @classmethod
    def from_settings(cls, serving: ServingEndpoints, s: Settings,
                      has_placement: Callable[[str], bool],
                      country_of: Callable[[str], str | None] | None,
                      has_shape: Callable[[str, int, int], bool] = lambda *_: True,
                      ) -> OpenRtbEndpoint:
        """The endpoint of a serving process, as its settings say."""
        return cls(serving, currency=s.currency, rates=s.openrtb_exchange_rates,
                   bills_on=s.openrtb_bills_on, keys=s.openrtb_exchange_keys,
                   network_margin_ms=s.openrtb_network_margin_ms,
                   has_placement=has_placement, country_of=country_of, has_shape=has_shape)

    def hot_routes(self) -> dict[tuple[str, str], Any]:
        """The bare ASGI handler :class:`~adfunnel.serving.deadline.ArrivalStamp` serves."""
        return {("POST", BID_PATH): self.bid_asgi}

    def routes(self) -> list[Route]:
        """The same route in the framework: what reaches it there is another method (405
        naming POST, as select's) or a POST with no :class:`ArrivalStamp` in front."""
        return [Route(BID_PATH, self.bid_endpoint, methods=["POST"])]

    async def bid_endpoint(self, request: Request) -> Response:
        """``bid`` as a Starlette endpoint."""
        try:
            status, headers, body = await self.bid(request.scope, request.receive)
        except ClientGone:
            return Response(status_code=499)
        return RawResponse(status, headers, body)

    async def bid_asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            status, headers, body = await self.bid(scope, receive)
        except ClientGone:
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def bid(self, scope: dict[str, Any], receive: Any) -> Answer:
        """The answer to one bid request (module doc)."""
        start = arrival_ms(scope)
        req, exchange, refused = await self._read(scope, receive)
        if req is None:
            _COUNTS["refused"].inc()
            assert refused is not None
            return refused
        wants_reasons = _wants_reasons(scope, req)
        config = self.config if exchange is None else replace(self.config, exchange=exchange)
        mapped = map_request(req, config)
        if mapped.select is None:
            return self._no_bid(req, mapped.no_bid, wants_reasons)
        if mapped.deadline_ms <= 0:  # tmax <= the network margin: a bid would come late,
            _COUNTS["late"].inc()    # and hold its reservation for nothing; no supply
            return _NO_CONTENT["late"]  # we can sell either (not sampled for forecasts)
        serving = self.serving
        if serving.sample is not None and req.test != 1:  # the forecast's request sample
            serving.sample(mapped.select)
        return await self._decide(req, mapped, start, wants_reasons)

    async def _read(self, scope: dict[str, Any], receive: Any
                    ) -> tuple[BidRequest | None, str | None, Answer | None]:
        """(the request, the calling exchange's name), or (None, None, the refusal:
        503 not ready, 401/403 key, 413 too large, 400 naming the field)."""
        serving = self.serving
        if not serving.ready():
            return None, None, _error(503, "not_ready", [("server", "behind the change log")])
        exchange, refused = self._exchange(scope)
        if refused is not None:
            return None, None, refused
        body = await read_body(scope, receive, serving.max_body_bytes)
        if body is None:
            return None, None, _error(413, "too_large",
                                      [("body", f"over {serving.max_body_bytes} bytes")])
        try:
            return decode_bid_request(body), exchange, None
        except BidRequestError as exc:
            return None, None, _error(400, "invalid_bid_request", exc.fields)

    async def _decide(self, req: BidRequest, mapped: Mapped, start: float,
                      wants_reasons: bool) -> Answer:
        """Decide, reprice and commit in time (the shared runner); the bids or 204."""
        assert mapped.select is not None
        bids: list[Bid] = []
        reasons = {t.imp_id: "no_fill" for t in mapped.imps.values()}
        test = req.test == 1  # no billing: tokens that never bill, nothing committed
        adjust = partial(self._adjust, mapped=mapped, test=test, bids=bids, reasons=reasons,
                         now=self.serving.decider.clock.now())  # type: ignore[attr-defined]
        request_id = f"ortb-{req.id}"[:128]
        schain = req.source.schain if req.source is not None else None
        committed = await self.serving.runner.run(
            mapped.select, request_id, start + mapped.deadline_ms, adjust,
            supply_chain=msgspec.json.encode(schain).decode() if schain else None,
            dry_run=test)
        if committed.outcome != DECIDED:
            outcome = "shed" if committed.outcome == "shed" else "late"
            _COUNTS[outcome].inc()
            return _NO_CONTENT[outcome]
        if not bids:
            return self._no_bid(req, {**mapped.no_bid, **reasons}, wants_reasons)
        _COUNTS["bid"].inc()
        out = bid_response(req.id, bids, self.currency, request_id)
        return 200, [_JSON, (b"content-length", b"%d" % len(out))], out

    def _adjust(self, decision: Decision, *, mapped: Mapped, now: datetime, test: bool,
                bids: list[Bid], reasons: dict[str, str]) -> None:
        """The runner's ``adjust``, before the deadline check (what is committed is
        exactly what is answered): the winners repriced as bids, each token signed once,
        at its bid's price (:func:`reprice`, each one's worst cost re-checked against its
        budget; a ``test`` request's tokens never bill, and its check is the dry run's,
        :func:`~adfunnel.serving.dry_run.dry_admit`), their bids appended to ``bids``; the
        winners dropped give back their frequency-cap counts (the kept keep theirs)."""
        decider = self.serving.decider
        won = [p.ad.id for p in decision.placed]
        prices = reprice(
            decision, mapped, key=decider.token_key,  # type: ignore[attr-defined]
            token_ttl_s=decider.token_ttl_s,  # type: ignore[attr-defined]
            release=getattr(decider, "shading", None), now=now,
            billable_event=TEST_BID if test else self.billable_event, reasons=reasons,
            room=lambda c, micros: (dry_admit(decider.gate, c, now, micros) is None if test
                                    else fits(decider.gate, c, now, micros)))
        bids.extend(self._bids(decision, mapped, prices, reasons))
        kept = {p.ad.id for p in decision.placed}
        dropped = [a for a in won if a not in kept]
        if dropped:
            decider.abandon(decision, dropped)

    def _bids(self, decision: Decision, mapped: Mapped, prices: dict[str, int],
              reasons: dict[str, str]) -> list[Bid]:
        """The bids of the decision's winners. Dropped from the decision (their reason in
        ``reasons``, which loses each imp bid on): a winner with nothing to render
        (``no_markup``), and one an ``imp.secure`` imp cannot load (``not_secure``: markup
        or notice URLs not all https). An ad bid with its landing host as ``adomain`` is
        judged by that host in the funnel already (``badv``:
        :func:`adfunnel.targeting.blocks.ad_domains`)."""
        base = self.serving.url_prefix
        key: bytes = self.serving.decider.token_key  # type: ignore[attr-defined]
        bids: list[Bid] = []
        kept = []
        for p in decision.placed:
            terms = mapped.imps[p.win.slot_id]
            token = p.token  # signed here, once (Placed.token)
            urls = notice_urls(token, base, key)  # n: the exchange's proof
            adm = (ad_markup(p.ad, token, base, p.ad.width, p.ad.height)
                   if terms.native is None else native_adm(p.ad, urls, terms.native))
            if adm is None:
                reasons[terms.imp_id] = "no_markup"
                continue
            if terms.secure and ("http://" in adm or not urls.nurl.startswith("https://")):
                reasons[terms.imp_id] = "not_secure"  # an https page cannot load it
                continue
            kept.append(p)
            del reasons[terms.imp_id]
            bids.append(Bid(
                id=p.served.impression_id, impid=terms.imp_id,
                price=spec_price(prices[p.win.slot_id]), adid=str(p.ad.id),
                crid=_crid(p.ad), w=p.ad.width, h=p.ad.height, adm=adm, nurl=urls.nurl,
                burl=urls.burl, lurl=urls.lurl,
                adomain=_adomain(p.ad), cat=list(p.ad.categories)))
        decision.placed = kept
        return bids

    def _no_bid(self, req: BidRequest, reasons: dict[str, str], wants: bool) -> Answer:
        _COUNTS["no_bid"].inc()
        if not wants:
            return _NO_CONTENT["no_fill"]
        out = no_bid_response(req.id, reasons)
        return 200, [_JSON, (b"content-length", b"%d" % len(out))], out

    def _exchange(self, scope: dict[str, Any]) -> tuple[str | None, Answer | None]:
        """(the calling exchange's name, None), or (None, 401/403) when keys are set
        and the header holds none of them."""
        if not self.keys:
            return None, None
        given = next((v for k, v in scope["headers"] if k == KEY_HEADER), b"")
        if not given.strip():
            return None, _error(401, "unauthorized", [(KEY_HEADER.decode(),
                                "this endpoint needs an exchange key")])
        found = None
        for name, key in self.keys:  # every key compared: no early exit to time
            if hmac.compare_digest(given, key):
                found = name
        if found is None:
            return None, _error(403, "forbidden", [(KEY_HEADER.decode(),
                                "not an exchange key of this server")])
        return found, None


def catalog_has_shape(index: object, shape: tuple[object, ...]) -> bool:
    """Whether ``index`` (the catalogue's) holds ads of ``shape`` (format, width,
    height); True for an index not partitioned by shape (it cannot tell)."""
    shapes = getattr(index, "shapes", None)
    return True if shapes is None else tuple(shape) in shapes()


def _wants_reasons(scope: dict[str, Any], req: BidRequest) -> bool:
    """``?nbr=1`` on the URL, or ``ext.adfunnel.nbr`` true in the request."""
    if b"nbr=1" in scope.get("query_string", b"").split(b"&"):
        return True
    ext = req.ext
    ours = ext.get("adfunnel") if isinstance(ext, dict) else None
    return isinstance(ours, dict) and ours.get("nbr") is True


def _error(status: int, error: str, fields: list[tuple[str, str]]) -> Answer:
    r = error_response(status, error, fields)
    return r.status_code, r.raw_headers, bytes(r.body)


def _crid(ad: Ad) -> str:
    """The creative's id: the ad's id and version (an edit of the creative is a new one)."""
    return f"{ad.id}.{ad.version}"


def _adomain(ad: Ad) -> list[str]:
    """The advertiser's domains: the ad's ``adomain``, else its landing URL's host."""
    if ad.adomain:
        return list(ad.adomain)
    host = _landing_host(ad.landing_url)
    return [host] if host else []


@functools.lru_cache(maxsize=4096)
def _landing_host(url: str) -> str | None:
    """The host of a landing URL (parsed once per URL, not once per bid)."""
    return urlsplit(url).hostname

"""The HTTP routes of an exchange's OpenRTB notices: ``GET /rtb/win``, ``GET /rtb/bill``
and ``GET /rtb/loss`` (the URL shapes of :mod:`adfunnel.tracking.notices`; what each
does and why anyone may call them: :mod:`adfunnel.tracking.notice_desk`).

Answers: 204 when the notice was taken (billed, recorded, a house ad's, or a replay the
log or the ledger will drop); 400 ``invalid_token`` naming ``t`` (forged, malformed,
expired) or ``n`` (the exchange's proof missing or wrong: the markup's token alone); 400
``invalid_price`` naming ``p`` (missing, unsubstituted ``${AUCTION_PRICE}``, negative,
not a number, absurd, above our bid) or ``m``; 400 ``invalid_loss_reason`` naming ``r``;
503 with ``Retry-After`` when neither the event log nor its spool could store it (the
exchange retries; nothing was acknowledged). Never a 5xx for bad input."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from adfunnel.http_errors import error_response
from adfunnel.tracking.beacons import Tracker
from adfunnel.tracking.notice_desk import UNAVAILABLE, NoticeDesk, NoticeResult
from adfunnel.tracking.notices import BILL_PATH, LOSS_PATH, NOTICE_PROOF, WIN_PATH

_ERRORS = {"t": "invalid_token", "n": "invalid_token", "p": "invalid_price",
           "m": "invalid_price", "r": "invalid_loss_reason"}


def notice_routes(tracker: Tracker) -> list[Route]:
    """The three notice routes over ``tracker`` (its sink, clock, keys and counts)."""
    desk = NoticeDesk(tracker)

    async def win(request: Request) -> Response:
        q = request.query_params
        return _answer(await desk.win(q.get("t"), q.get("p"), q.get(NOTICE_PROOF)))

    async def bill(request: Request) -> Response:
        q = request.query_params
        return _answer(await desk.bill(q.get("t"), q.get("p"), q.get(NOTICE_PROOF)))

    async def loss(request: Request) -> Response:
        q = request.query_params
        return _answer(await desk.loss(q.get("t"), q.get("r"), q.get("m"),
                                       q.get(NOTICE_PROOF)))

    return [Route(WIN_PATH, win, methods=["GET"]), Route(BILL_PATH, bill, methods=["GET"]),
            Route(LOSS_PATH, loss, methods=["GET"])]


def _answer(result: NoticeResult) -> Response:
    if result.refused:
        field = result.field or "t"
        return error_response(400, _ERRORS.get(field, "invalid_notice"),
                              [(field, f"{result.reason}: {result.problem}")])
    if result.outcome == UNAVAILABLE:
        return error_response(503, "event_log_unavailable",
                              [("t", "the notice could not be stored; retry")],
                              headers={"retry-after": "1"})
    return Response(status_code=204)

"""OpenRTB notice URLs: where an exchange tells us a bid won, was billed, or lost.

OpenRTB 2.6 §4.4 (substitution macros) and §3.2.19 (``Bid.nurl``, ``burl``, ``lurl``).
Every URL carries the bid's signed serve token (:mod:`adfunnel.tracking.token`) whose
``price_micros`` is our bid, CPM micros in the deployment's currency: the ceiling of
any clearing price a notice may report. The exchange substitutes the macros before it
calls them:

- win notice ``/rtb/win?t=TOKEN&p=${AUCTION_PRICE}``;
- billing notice ``/rtb/bill?t=TOKEN&p=${AUCTION_PRICE}``;
- loss notice ``/rtb/loss?t=TOKEN&r=${AUCTION_LOSS}&m=${AUCTION_MIN_TO_WIN}``;
- in the ad markup (``adm``), the impression beacon ``/i?t=TOKEN&p=${AUCTION_PRICE}``
  and the click ``/c?t=TOKEN``.

``${AUCTION_PRICE}`` is the clearing price, CPM in the bid's currency units (a decimal
text, as the exchange writes it). The token alone bills nothing: a notice bills only
the price it names, never above the bid in the token, once per impression id.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

WIN_PATH = "/rtb/win"
BILL_PATH = "/rtb/bill"
LOSS_PATH = "/rtb/loss"
#: The macros of OpenRTB 2.6 §4.4 we ask the exchange to fill in.
AUCTION_PRICE = "${AUCTION_PRICE}"
AUCTION_LOSS = "${AUCTION_LOSS}"
AUCTION_MIN_TO_WIN = "${AUCTION_MIN_TO_WIN}"


@dataclass(frozen=True, slots=True)
class NoticeUrls:
    """The notice and markup URLs of one bid (absolute when ``base_url`` is set)."""

    nurl: str
    burl: str
    lurl: str
    impression: str
    click: str


def notice_urls(token: str, base_url: str = "") -> NoticeUrls:
    """The URLs of the bid whose signed serve token is ``token``.

    ``base_url`` is the public origin the exchange and the page reach us at (the
    ``public_base_url`` setting, no trailing slash), or empty for relative URLs. The
    token is URL-safe base64 (no escaping needed); the macros stay literal for the
    exchange to substitute.
    """
    win, bill, loss, impression, click = _prefixes(base_url)
    return NoticeUrls(
        nurl=f"{win}{token}{_PRICE}",
        burl=f"{bill}{token}{_PRICE}",
        lurl=f"{loss}{token}{_LOSS}",
        impression=f"{impression}{token}{_PRICE}",
        click=f"{click}{token}",
    )


_PRICE = f"&p={AUCTION_PRICE}"
_LOSS = f"&r={AUCTION_LOSS}&m={AUCTION_MIN_TO_WIN}"


@functools.lru_cache(maxsize=16)
def _prefixes(base_url: str) -> tuple[str, str, str, str, str]:
    """What comes before the token in each URL under ``base_url`` (a deployment has one:
    built once, not once per bid)."""
    base = base_url.rstrip("/")
    return (f"{base}{WIN_PATH}?t=", f"{base}{BILL_PATH}?t=", f"{base}{LOSS_PATH}?t=",
            f"{base}/i?t=", f"{base}/c?t=")

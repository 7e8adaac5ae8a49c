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

**The exchange's proof** (``n``). The page that shows ``adm`` sees the token (the
impression beacon, the click, the frame), so the token alone must not settle a bid's
money: a page's ``/rtb/bill?t=…&p=0`` sent first would bill nothing while the exchange
bills us, and its ``/rtb/loss`` would free a shown ad's reservation. The three notice
URLs therefore also carry ``n``, an HMAC-SHA256 of the token under the token secret
with its own label (:func:`notice_mac`), which only the bid response's
``nurl``/``burl``/``lurl`` hold — never the markup. A notice without a valid ``n`` is
refused (:mod:`adfunnel.tracking.notice_desk`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
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


def notice_urls(token: str, base_url: str = "", key: bytes = b"") -> NoticeUrls:
    """The URLs of the bid whose signed serve token is ``token``.

    ``base_url`` is the public origin the exchange and the page reach us at (the
    ``public_base_url`` setting, no trailing slash), or empty for relative URLs. The
    token is URL-safe base64 (no escaping needed); the macros stay literal for the
    exchange to substitute. ``key``: the token secret, which signs the notices' ``n``
    (:func:`notice_mac`); empty when only the markup's URLs are wanted (``nurl``,
    ``burl`` and ``lurl`` are then empty: the markup never holds them).
    """
    win, bill, loss, impression, click = _prefixes(base_url)
    proof = f"&{NOTICE_PROOF}={notice_mac(token, key)}" if key else None
    return NoticeUrls(
        nurl=f"{win}{token}{proof}{_PRICE}" if proof else "",
        burl=f"{bill}{token}{proof}{_PRICE}" if proof else "",
        lurl=f"{loss}{token}{proof}{_LOSS}" if proof else "",
        impression=f"{impression}{token}{_PRICE}",
        click=f"{click}{token}",
    )


#: The notice URLs' query parameter holding :func:`notice_mac`.
NOTICE_PROOF = "n"
_NOTICE_LABEL = b"adfunnel-rtb-notice."


def notice_mac(token: str, key: bytes) -> str:
    """The exchange's proof for the notices of ``token`` (module docstring): the first
    16 bytes of HMAC-SHA256(``key``, label + token), URL-safe base64 without padding
    (22 characters). Distinct from the token's own MAC (another message), so nothing
    the page sees yields it."""
    mac = hmac.new(key, _NOTICE_LABEL + token.encode("ascii", "replace"),
                   hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def notice_mac_ok(token: str, proof: str | None, keys: tuple[bytes, ...]) -> bool:
    """True when ``proof`` is :func:`notice_mac` of ``token`` under one of ``keys`` (the
    current token secret, then earlier ones: rotation), compared in constant time."""
    if not proof or not proof.isascii():
        return False
    return any(hmac.compare_digest(proof, notice_mac(token, k)) for k in keys)


_PRICE = f"&p={AUCTION_PRICE}"
_LOSS = f"&r={AUCTION_LOSS}&m={AUCTION_MIN_TO_WIN}"


@functools.lru_cache(maxsize=16)
def _prefixes(base_url: str) -> tuple[str, str, str, str, str]:
    """What comes before the token in each URL under ``base_url`` (a deployment has one:
    built once, not once per bid)."""
    base = base_url.rstrip("/")
    return (f"{base}{WIN_PATH}?t=", f"{base}{BILL_PATH}?t=", f"{base}{LOSS_PATH}?t=",
            f"{base}/i?t=", f"{base}/c?t=")

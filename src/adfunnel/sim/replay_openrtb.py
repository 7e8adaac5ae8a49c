"""``adfunnel replay --openrtb``: the real iPinYou log as an exchange's OpenRTB 2.6 traffic.

The replay (:func:`adfunnel.sim.replay.run_replay`: the server process, the campaigns,
the clock, the report) runs with an :class:`OpenRtbReplayer`, which plays the exchange:

- each row becomes a ``BidRequest`` (:func:`bid_request`) posted to ``/openrtb2/bid``
  with the key of the row's exchange (``x-openrtb-key``; the server knows the three
  iPinYou exchanges by name, so campaigns targeting ``exchange`` still apply);
- our bid wins when its price is above the row's real winning price ``payprice`` (the
  second price: the clearing price is ``payprice``, never above our bid); the exchange
  then calls ``nurl`` and ``burl`` with ``${AUCTION_PRICE}`` as a float printed with six
  decimals (as exchanges print it), and the markup's impression beacon and click fire
  with the main replay's render and click draws (:meth:`Replayer._beacons`: in the
  default ``burl`` mode the beacon bills nothing);
- otherwise ``lurl`` with ``${AUCTION_LOSS}`` = 102 (lost to a higher bid) and
  ``${AUCTION_MIN_TO_WIN}`` = ``payprice``.

Bad notices (every :data:`CHECK_EVERY`-th win): a forged billing notice (its token's
MAC altered), one above our bid and one a page could send (the markup's token at
``p=0``, without the exchange's proof ``n``) are sent before the real one; that win's real billing
notice is held back and sent late, once the log's clock is past its token's expiry (at
the end, the clock is moved past the last). The server must refuse each (its counters
say so: :mod:`adfunnel.sim.replay_openrtb_report`), and a late notice bills nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

from adfunnel.money import MICROS_PER_FEN, MICROS_PER_UNIT
from adfunnel.sim.invalid import row_address
from adfunnel.sim.ipinyou import LogRow, split_useragent
from adfunnel.sim.replayer import Replayer
from adfunnel.tracking.token import verify

#: The replay's exchanges (the log's ``adexchange``) and the key each calls us with.
EXCHANGE_KEYS = {"1": "ipinyou-exchange-1-key", "2": "ipinyou-exchange-2-key",
                 "3": "ipinyou-exchange-3-key"}
#: OpenRTB 2.6 §5.25: "Lost to Higher Bid".
LOST_TO_HIGHER_BID = 102
#: Every CHECK_EVERY-th win sends a forged and an above-the-bid billing notice, and its
#: real billing notice late.
CHECK_EVERY = 200
TMAX_MS = 100
#: A representative user agent per iPinYou ``os_browser`` (the log keeps only the pair;
#: an exchange sends the browser's text). Pairs not here are sent as the log has them.
_OS_UA = {"windows": "Windows NT 6.1; WOW64", "mac": "Macintosh; Intel Mac OS X 10_8_5",
          "linux": "X11; Linux x86_64", "android": "Linux; Android 4.2.2; GT-I9500"}
_BROWSER_UA = {
    "chrome": "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/30.0.1599.101 Safari/537.36",
    "firefox": "Gecko/20100101 Firefox/24.0",
    "safari": "AppleWebKit/536.30.1 (KHTML, like Gecko) Version/6.0.5 Safari/536.30.1",
    "opera": "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/29.0 Safari/537.36 OPR/16.0",
}


def user_agent(pair: str) -> str:
    """A browser's user agent text for the log's ``os_browser`` pair (module table)."""
    _, os_name, browser = split_useragent(pair)
    if os_name not in _OS_UA:
        return pair
    if browser == "ie" and os_name == "windows":
        return "Mozilla/5.0 (compatible; MSIE 9.0; Windows NT 6.1; Trident/5.0)"
    if browser in _BROWSER_UA:
        return f"Mozilla/5.0 ({_OS_UA[os_name]}) {_BROWSER_UA[browser]}"
    return pair


def fen_text(fen: int) -> str:
    """A CPM in fen as the exchange prints a price: CNY, a float with six decimals."""
    return f"{fen / 100:.6f}"


def bid_request(row: LogRow, request_id: str) -> dict[str, Any]:
    """The OpenRTB 2.6 ``BidRequest`` an exchange would send for ``row`` (CNY)."""
    page = f"http://{row.domain}/"
    geo = {"country": "CHN", "region": row.region, "city": row.city}
    return {
        "id": request_id, "tmax": TMAX_MS, "at": 2, "cur": ["CNY"],
        "imp": [{"id": "1", "tagid": row.slot_id,
                 "banner": {"w": row.width, "h": row.height},
                 "bidfloor": row.slot_price_fen / 100, "bidfloorcur": "CNY"}],
        "site": {"domain": row.domain, "page": page},
        "device": {"ua": user_agent(row.useragent), "ip": row_address(row.ip), "geo": geo},
        "user": {"id": row.user},
    }


@dataclass
class OpenRtbStats:
    """What the exchange side sent and saw (the server's own counts are read after)."""

    bids: int = 0
    no_content: int = 0  # 204: shed or late
    no_bid_reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    wins: int = 0
    losses: int = 0
    #: our bid per won impression id, CPM micros (the report reads the ledger by it)
    won: dict[str, int] = field(default_factory=dict)
    clearing_ratios: list[float] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: impression ids whose real billing notice went late
    late_ids: list[str] = field(default_factory=list)


class OpenRtbReplayer(Replayer):
    """A :class:`Replayer` that sells over OpenRTB and plays the exchange (module doc)."""

    creative_prefix = "https://creatives.example/"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rtb = OpenRtbStats()
        self._late: list[tuple[float, str]] = []  # (token expiry, unix s; billing URL)

    def replay(self, rows: list[LogRow], progress: Any = None) -> None:
        super().replay(rows, progress)
        self.flush_late(force=True)

    def _one(self, row: LogRow, ctr_by_campaign: dict[int, float]) -> None:
        s = self.stats
        s.requests += 1
        size = self.sizes[f"{row.width}x{row.height}"]  # the sales report's counts
        size[0] += 1
        self.placements_sent[row.slot_id] += 1
        self.flush_late(now=row.timestamp)
        t0 = time.perf_counter()
        r = self.http.post("/openrtb2/bid", params={"nbr": "1"},
                           json=bid_request(row, f"rtb-{self.seed}-{s.requests}"),
                           headers={"x-openrtb-key": EXCHANGE_KEYS[row.exchange]})
        s.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if r.status_code == 204:
            self.rtb.no_content += 1
            return
        if r.status_code != 200:
            s.errors[f"bid_{r.status_code}"] += 1
            return
        body = r.json()
        if not body.get("seatbid"):
            for reason in body.get("ext", {}).get("adfunnel", {}).get("reasons", {}).values():
                self.rtb.no_bid_reasons[reason] += 1
            return
        for seat in body["seatbid"]:
            for bid in seat["bid"]:
                size[1] += 1
                self._auction(row, bid, ctr_by_campaign)

    def _auction(self, row: LogRow, bid: dict[str, Any],
                 ctr_by_campaign: dict[int, float]) -> None:
        """The exchange's auction of ``row`` with our ``bid`` in it, and its notices."""
        rtb, s = self.rtb, self.stats
        rtb.bids += 1
        s.filled_slots += 1
        bid_micros = int(Decimal(repr(bid["price"])) * MICROS_PER_UNIT)
        pay_micros = row.pay_price_fen * MICROS_PER_FEN
        if bid_micros <= pay_micros:
            rtb.losses += 1
            self._notice("loss", bid["lurl"].replace("${AUCTION_LOSS}", str(LOST_TO_HIGHER_BID))
                         .replace("${AUCTION_MIN_TO_WIN}", fen_text(row.pay_price_fen)))
            return
        rtb.wins += 1
        price = fen_text(row.pay_price_fen)
        token = parse_qs(urlsplit(bid["burl"]).query)["t"][0]
        rtb.won[bid["id"]] = bid_micros
        rtb.clearing_ratios.append(pay_micros / bid_micros)
        self._notice("win", bid["nurl"].replace("${AUCTION_PRICE}", price))
        burl = bid["burl"].replace("${AUCTION_PRICE}", price)
        if rtb.wins % CHECK_EVERY == 0:
            forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
            self._notice("forged", burl.replace(token, forged))
            above = f"{(bid_micros + MICROS_PER_FEN) / MICROS_PER_UNIT:.6f}"
            self._notice("above_bid", bid["burl"].replace("${AUCTION_PRICE}", above))
            # what the page can send: the markup's token without the exchange's proof
            self._notice("page", burl.replace(f"&n={_proof(bid['burl'])}", "")
                         .replace(f"&p={price}", "&p=0"))
            self._hold_late(token, burl, bid["id"])
        else:
            self._notice("bill", burl)
        ad = {"token": token, "ad_id": int(bid["adid"]), "campaign_id": self._campaign(token),
              "impression_url": _impression_url(bid["adm"]).replace("${AUCTION_PRICE}", price),
              "click_url": _click_url(bid["adm"])}
        self._beacons(ad, ctr_by_campaign.get(ad["campaign_id"], 0.0), row)

    def _campaign(self, token: str) -> int | None:
        if self.token_key is None:
            return None
        return verify(token, self.token_key, 0.0).campaign_id

    def _hold_late(self, token: str, burl: str, impression_id: str) -> None:
        if self.token_key is None:  # no expiry to wait for: not sent
            return
        self._late.append((verify(token, self.token_key, 0.0).expires_at, burl))
        self.rtb.late_ids.append(impression_id)

    def flush_late(self, now: datetime | None = None, force: bool = False) -> None:
        """Send the held billing notices whose token has expired by ``now`` (the log's
        time, a second behind the server's at most); ``force``: move the server's clock
        past the last expiry and send them all."""
        if not self._late:
            return
        if force:
            at = datetime.fromtimestamp(max(e for e, _ in self._late) + 2, UTC)
            self.http.put("/v1/admin/clock", json={"now": at.isoformat()})
            due, self._late = self._late, []
        else:
            assert now is not None
            limit = (now - timedelta(seconds=2)).timestamp()
            due = [x for x in self._late if x[0] < limit]
            self._late = [x for x in self._late if x[0] >= limit]
        for _, url in due:
            self._notice("late", url)

    def _notice(self, kind: str, url: str) -> None:
        """GET a notice URL (``kind`` names it in the exchange's own count)."""
        self.rtb.sent[kind] += 1
        r = self.http.get(url)
        self._unsettled = True
        good = kind in ("win", "bill", "loss")
        if (r.status_code == 204) != good:
            self.stats.errors[f"notice_{kind}_{r.status_code}"] += 1


def _proof(url: str) -> str:
    """The exchange's proof ``n`` of a notice URL."""
    return parse_qs(urlsplit(url).query)["n"][0]


def _impression_url(adm: str) -> str:
    """The markup's impression beacon: the last image (the 1x1 pixel after the ad)."""
    return unescape(adm.rsplit('<img src="', 1)[1].split('"', 1)[0])


def _click_url(adm: str) -> str:
    """The markup's click URL: the ad's link."""
    return unescape(adm.split('href="', 1)[1].split('"', 1)[0])

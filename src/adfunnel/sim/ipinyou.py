"""The one reader of the real iPinYou logs in ``shared/data/ipinyou`` (see its README).

Every user of the logs (the replay, the day simulation's traffic curve, the index
benchmark's real workload) reads them here, as typed :class:`LogRow` values.

Impression log columns (tab-separated, no header; the test log has two extra
trailing columns that are ignored)::

    click weekday hour bidid timestamp logtype ipinyouid useragent IP region city
    adexchange domain url urlid slotid slotwidth slotheight slotvisibility slotformat
    slotprice creative bidprice payprice keypage advertiser usertag

``timestamp`` is ``yyyyMMddHHmmssSSS`` in China time; prices are CPM in fen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from adfunnel.data import data_dir

CHINA = ZoneInfo("Asia/Shanghai")
ADVERTISERS = ("1458", "2259", "2261", "2821", "2997", "3358", "3386", "3427", "3476")


@dataclass(frozen=True, slots=True)
class LogRow:
    """One impression opportunity of the log, typed."""

    timestamp: datetime  # aware, China time
    user: str
    useragent: str
    ip: str  # the log masks the last octet: "113.76.1.*"
    region: str
    city: str
    exchange: str
    domain: str
    slot_id: str
    width: int
    height: int
    visibility: str
    slot_format: str
    slot_price_fen: int  # reserve, CPM fen
    pay_price_fen: int  # what the real auction charged, CPM fen
    usertags: tuple[str, ...]
    click: bool


def parse_line(line: str) -> LogRow:
    """Parse one log line.

    Raises:
        ValueError: a line with fewer than 27 columns or non-integer numbers.
    """
    f = line.rstrip("\n").split("\t")
    if len(f) < 27:
        raise ValueError(f"expected >= 27 columns, got {len(f)}")
    ts = datetime.strptime(f[4][:14], "%Y%m%d%H%M%S").replace(
        microsecond=int(f[4][14:17] or 0) * 1000, tzinfo=CHINA
    )
    tags = () if f[26] in ("null", "") else tuple(t for t in f[26].split(",") if t)
    return LogRow(
        timestamp=ts, user=f[6], useragent=f[7], ip=f[8], region=f[9], city=f[10], exchange=f[11],
        domain=f[12], slot_id=f[15], width=int(f[16]), height=int(f[17]), visibility=f[18],
        slot_format=f[19], slot_price_fen=int(f[20]), pay_price_fen=int(f[23]),
        usertags=tags, click=f[0] == "1",
    )


def iter_log(path: Path) -> Iterator[LogRow]:
    """The rows of one log file in file order (blank lines skipped).

    Raises:
        OSError: the file cannot be read.
        ValueError: a malformed line (:func:`parse_line`).
    """
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield parse_line(line)


def read_log(paths: list[Path]) -> list[LogRow]:
    """Every row of ``paths`` in timestamp order (stable for equal timestamps)."""
    rows: list[LogRow] = []
    for p in paths:
        rows.extend(iter_log(p))
    rows.sort(key=lambda r: r.timestamp)
    return rows


def load_rows(limit: int | None = None, data_root: Path | None = None) -> list[LogRow]:
    """The rows of :func:`default_logs` in timestamp order, the first ``limit`` of them
    when given (what ``adfunnel replay`` replays)."""
    rows = read_log(default_logs(data_root))
    return rows[:limit] if limit else rows


def default_logs(root: Path | None = None) -> list[Path]:
    base = (root or data_dir()) / "ipinyou" / "dlf_2259"
    return [base / "train.log.txt", base / "test.log.txt"]


@dataclass(frozen=True, slots=True)
class AdvertiserInfo:
    """Real figures of one iPinYou advertiser (``<id>.train-info.txt``).

    ``cpm_fen`` is the average CPM in fen per thousand impressions; ``cpc_fen`` the
    average cost per click in fen; ``ctr`` the average click rate.
    """

    advertiser: str
    cpm_fen: float
    cpc_fen: float
    ctr: float


def read_train_info(advertiser: str, root: Path | None = None) -> AdvertiserInfo:
    """Parse ``train-info.txt``; its CPM and CPC are stored ×1000 (milli-fen)."""
    path = (root or data_dir()) / "ipinyou" / "rlbdp_click_marketprice_pctr" / (
        f"{advertiser}.train-info.txt"
    )
    values: dict[str, float] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("CPC", "CPM", "avg ctr"):
            values[key] = float(value)
    return AdvertiserInfo(advertiser, values["CPM"] / 1000, values["CPC"] / 1000, values["avg ctr"])


def split_useragent(ua: str) -> tuple[str, str, str]:
    """``windows_chrome`` → (device_type, os, browser)."""
    os_name, _, browser = ua.partition("_")
    device = "mobile" if os_name in ("android", "ios") else "desktop"
    return device, os_name or "other", browser or "other"

"""Process logging: one handler on stderr, as text or as one JSON object per line.

``configure_logging`` is called once by each process's entry point (``adfunnel serve``,
``tracker``, ``aggregator``, ``budget-service`` and the workers of ``serve --workers``);
libraries and tests never configure logging. uvicorn is started without its own
logging configuration (:func:`adfunnel.runtime.server.server_config`), so its lines go through
the same handler.

JSON lines carry ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message`` and every ``extra`` field of the record (the access log's ``method``,
``path``, ``status``, ``latency_ms``, ``request_id``).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, TextIO
from urllib.parse import urlsplit, urlunsplit

from pythonjsonlogger.msgspec import MsgspecFormatter

if TYPE_CHECKING:
    from adfunnel.settings import Settings

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: The handler :func:`configure_logging` installs (marked, so a second call replaces it).
_HANDLER_MARK = "_adfunnel_handler"


class JsonLines(MsgspecFormatter):
    """python-json-logger's msgspec formatter with the house's field names and a UTC
    ISO 8601 ``time`` (the record's wall-clock creation instant: log time, not domain
    time)."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s",
                         rename_fields={"levelname": "level", "name": "logger"})

    def add_fields(self, log_data: dict, record: logging.LogRecord, message_dict: dict) -> None:
        log_data["time"] = _iso_utc(record.created)
        super().add_fields(log_data, record, message_dict)


class TextLines(logging.Formatter):
    """``2026-12-01T21:50:00.123Z INFO adfunnel.access message``: for a person at a
    terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_utc(record.created)


_second: tuple[int, str] = (0, "")  # a whole second and its ISO text up to the seconds


def _iso_utc(created: float) -> str:
    """``2026-12-01T21:50:00.123Z``; the text up to the second is reused within one
    second (a record per request would format it anew each time)."""
    global _second
    whole = int(created)
    cached, text = _second
    if cached != whole:
        text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _second = (whole, text)  # one assignment: threads see the old pair or the new
    return f"{text}.{int((created - whole) * 1000):03d}Z"


def _lean_records() -> None:
    """Leave out of every log record what no line of ours shows: the caller's source
    location, thread, process and multiprocessing names (the logging HOWTO's
    "Optimization" switches). Each costs a stack walk or a lookup per record, and the
    access log writes a record per request."""
    logging._srcfile = None  # type: ignore[attr-defined]  # the documented switch
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def configure_logging(fmt: LogFormat = "text", *, level: int = logging.INFO,
                      stream: TextIO | None = None) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in ``fmt``
    (``text`` or ``json``); a previous handler of this function is replaced. Returns the
    handler.

    Raises:
        ValueError: an unknown ``fmt``.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLines() if fmt == "json" else TextLines())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    _lean_records()
    # at INFO alembic tells which dialect it uses on every start, and httpx logs every
    # request an ad server sends its budget service (one a second, forever): noise
    for name in ("alembic", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    return handler


def start_fields(settings: Settings, address: str, *, role: str = "serve") -> dict[str, str]:
    """The start-up line's fields: ``version``, ``role`` (the command: serve, tracker,
    aggregator), ``listen`` (``http://host:port``, or ``-``), ``store`` (the database
    URL, password hidden), ``event_log`` (``memory`` or the NATS URL, credentials hidden:
    :func:`shown_url`), ``served_log``
    (its directory, or ``none``) and ``clock`` (``system`` or ``manual``)."""
    from sqlalchemy.engine import make_url

    from adfunnel import __version__

    store = make_url(settings.database_url).render_as_string(hide_password=True)
    return {"version": __version__, "role": role, "listen": address, "store": store,
            "event_log": shown_url(settings.event_log_url) if settings.event_log_url
            else "memory",
            "served_log": settings.served_log_dir or "none", "clock": settings.clock}


def shown_url(url: str) -> str:
    """``url`` (several: comma-separated) as a log line may show it: a password becomes
    ``***``, and so does a user name given alone (a NATS auth token)."""
    return ",".join(_shown_one(u) for u in url.split(","))


def _shown_one(url: str) -> str:
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    name, colon, _ = user.partition(":")
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}" if colon else f"***@{host}"))


def log_start(settings: Settings, address: str, *, role: str = "serve") -> str:
    """Log the one start-up line (logger ``adfunnel.start``, INFO; JSON fields as in
    :func:`start_fields`) and return its message."""
    fields = start_fields(settings, address, role=role)
    message = (f"adfunnel {fields['version']} {role} listening on {address}: "
               f"store {fields['store']}, event log {fields['event_log']}, "
               f"served log {fields['served_log']}, clock {fields['clock']}")
    if settings.token_secret_note:  # where the secret lives, never the secret
        message += f"; {settings.token_secret_note}"
        fields["token_secret"] = settings.token_secret_note
    logging.getLogger("adfunnel.start").info(message, extra=fields)
    return message

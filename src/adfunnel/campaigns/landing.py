"""The landing-URL rule: what a landing URL may be, and its URI form for the click redirect.

:func:`landing_url_problem` is the rule the store and the API apply to every landing URL
(an absolute http/https URL with a host, no whitespace or control characters, at most
2048 characters; never rewritten). :func:`to_uri` gives its URI form (RFC 3987 §3.1),
sent as the click redirect's ``Location``; the API also refuses a URL that has none
(:func:`uri_problem`).

Advertisers may give an IRI (``https://www.bücher-müller.example/suche/straße``); it is
stored exactly as given and converted here when a click is redirected:

- the host goes through IDNA with UTS 46 mapping (non-transitional, as browsers do;
  the ``idna`` package), so ``bücher.example`` → ``xn--bcher-kva.example``;
- every non-ASCII character of userinfo, path, query and fragment becomes its UTF-8
  bytes percent-encoded (``ß`` → ``%C3%9F``), once;
- every ASCII character is kept byte for byte: existing ``%XX`` sequences, reserved
  and even unusual characters (``|``, ``^``) are not touched, an ASCII host is not
  re-cased, the port and an IPv6 literal (``[::1]``) stay as written.

So a pure-ASCII URL is returned unchanged by :func:`to_uri`, which is idempotent.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit

import idna

__all__ = ["MAX_URL_LENGTH", "LandingUrlError", "landing_url_problem", "to_uri", "uri_problem"]

MAX_URL_LENGTH = 2048

#: ``scheme://`` at the start of an absolute URL with an authority.
_AUTHORITY_START = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_AUTHORITY_END = re.compile(r"[/?#]")


def landing_url_problem(url: object) -> str | None:
    """Why ``url`` is not an acceptable landing URL, or ``None`` when it is.

    Accepted: an absolute ``http``/``https`` URL with a host, at most 2048 characters,
    without whitespace or control characters. The string itself is never rewritten.
    """
    if not isinstance(url, str):
        return "must be a string"
    if not url:
        return "must not be empty"
    if len(url) > MAX_URL_LENGTH:
        return f"longer than {MAX_URL_LENGTH} characters"
    if any(ch <= " " or ch == "\x7f" for ch in url):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "scheme must be http or https"
    if not parts.netloc or not parts.hostname:
        return "must include a host"
    return None


class LandingUrlError(ValueError):
    """A landing URL that has no URI form; ``problem`` says why, for an API error."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


@lru_cache(maxsize=4096)
def to_uri(url: str) -> str:
    """The URI form of ``url`` (an http/https URL or IRI); ASCII input is returned as is.

    Raises:
        LandingUrlError: the host is not a valid internationalised domain name (IDNA
            2008 with UTS 46 mapping), the port is not ASCII, or the text holds a lone
            surrogate (no UTF-8 form).
    """
    if url.isascii():
        return url
    start = _AUTHORITY_START.match(url)
    if start is None:  # no authority: only the non-ASCII characters change
        return _percent_encode(url)
    begin = start.end()
    end_match = _AUTHORITY_END.search(url, begin)
    end = end_match.start() if end_match else len(url)
    authority = _authority(url[begin:end])
    return url[:begin] + authority + _percent_encode(url[end:])


def uri_problem(url: str) -> str | None:
    """Why ``url`` has no URI form (the :class:`LandingUrlError` problem), or ``None``."""
    try:
        to_uri(url)
    except LandingUrlError as exc:
        return exc.problem
    return None


def _authority(authority: str) -> str:
    """``userinfo@host:port`` with the userinfo percent-encoded and the host IDNA-encoded."""
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):  # IPv6 literal: ASCII by definition, kept as written
        host, port = hostport, ""
        close = hostport.find("]")
        if close != -1:
            host, port = hostport[: close + 1], hostport[close + 1 :]
    else:
        host, colon, port = hostport.partition(":")
        port = colon + port
    if not port.isascii():
        raise LandingUrlError("the port must be ASCII digits")
    return _percent_encode(userinfo) + at + _idna_host(host) + port


def _idna_host(host: str) -> str:
    if host.isascii():
        return host  # an ASCII host is already a URI host; keep its bytes
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise LandingUrlError(f"host {host!r} is not a valid internationalised domain name "
                              f"({exc})") from None


def _percent_encode(text: str) -> str:
    """Non-ASCII characters → percent-encoded UTF-8 (upper-case hex); ASCII kept."""
    if text.isascii():
        return text
    try:
        return "".join(
            ch if ch.isascii() else "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
            for ch in text
        )
    except UnicodeEncodeError:
        raise LandingUrlError("holds a lone surrogate, which has no UTF-8 form") from None

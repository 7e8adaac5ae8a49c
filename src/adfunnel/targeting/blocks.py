"""Block lists: which ads a request refuses by content category, advertiser domain or app.

OpenRTB 2.6 requests carry ``bcat`` (blocked categories), ``badv`` (blocked advertiser
domains) and ``bapp`` (blocked apps); ads declare ``categories`` (IAB Tech Lab content
taxonomy 1.0 ids such as ``IAB7`` or ``IAB7-39``), ``adomain`` (advertiser domains) and
``bundle`` (the app an ad promotes). Pure rules, shared by the campaign side (validating
and normalising what an ad declares) and the serving side (matching):

- a blocked category blocks itself and its subcategories: ``IAB7`` blocks ``IAB7-39``;
  ``IAB7-3`` does not block ``IAB7-39`` (the match is at the ``-`` boundary, never a
  string prefix);
- a blocked domain blocks itself and its sub-domains, case-insensitively: ``ford.com``
  blocks ``www.ford.com``, not ``myford.com``;
- a blocked app blocks the bundle of exactly that name (bundle ids are case-sensitive
  on Android; iTunes ids are digits);
- an ad that declares no ``adomain`` is judged by its landing URL's host
  (:func:`ad_domains`): it is the ``adomain`` an OpenRTB bid of it carries, so ``badv``
  refuses it in the funnel, where a lower allowed ad can still take the slot.

Both rules are written as the *ancestors* of a declared value (:func:`category_keys`,
:func:`domain_keys`): a value is blocked when one of its keys is in the blocked set. The
ad server's inverted index files each ad under its keys, so a request's block list is a
few dictionary look-ups, not a scan of the catalogue.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import idna

#: An IAB content taxonomy 1.0 id: tier 1 ``IAB<n>``, tier 2 ``IAB<n>-<m>`` (1-based).
CATEGORY = re.compile(r"IAB[1-9][0-9]{0,2}(?:-[1-9][0-9]{0,2})?")
#: A host name label in A-label form (RFC 1123): letters, digits, inner hyphens.
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
#: Most values an ad may declare, per field.
MAX_CATEGORIES = 10
MAX_DOMAINS = 5
#: Longest app bundle or store id (Android package names are at most 255 characters).
MAX_BUNDLE_CHARS = 255
#: A URL's scheme and authority (RFC 3986): the landing host is in the group.
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
#: Longest DNS name (RFC 1035).
MAX_DOMAIN_CHARS = 253


class BlockValueError(ValueError):
    """A declared category, domain or bundle that is not of its form; ``str()`` says why."""


def normalise_category(value: object) -> str:
    """The canonical id of a content category: trimmed, ``IAB`` upper-case.

    Raises:
        BlockValueError: not a string of the IAB content taxonomy 1.0 id form.
    """
    if not isinstance(value, str):
        raise BlockValueError("must be a string")
    text = value.strip().upper()
    if not CATEGORY.fullmatch(text):
        raise BlockValueError(f"{value!r} is not an IAB content taxonomy 1.0 id "
                              "(IAB<n> or IAB<n>-<m>, e.g. IAB7-39)")
    return text


def normalise_domain(value: object) -> str:
    """The canonical form of an advertiser domain: lower case, A-labels (IDNA 2008 with
    UTS 46 mapping, so ``Bücher.example`` is ``xn--bcher-kva.example``), no final dot.

    Raises:
        BlockValueError: not a host name of two or more labels (a scheme, path, port,
            address or space is refused, not stripped).
    """
    if not isinstance(value, str):
        raise BlockValueError("must be a string")
    text = value.strip().rstrip(".")
    if not text or any(c in text for c in "/:@?# \t"):
        raise BlockValueError(f"{value!r} is not a host name (no scheme, port or path)")
    try:
        ascii_form = text.lower() if text.isascii() else idna.encode(text, uts46=True).decode()
    except (idna.IDNAError, UnicodeError) as exc:
        raise BlockValueError(f"{value!r} is not a host name ({exc})") from None
    labels = ascii_form.lower().split(".")
    if (len(labels) < 2 or len(ascii_form) > MAX_DOMAIN_CHARS
            or not all(_LABEL.fullmatch(label) for label in labels)
            or labels[-1].isdigit()):  # an address, not a name
        raise BlockValueError(f"{value!r} is not a host name of two or more labels")
    return ascii_form.lower()


def normalise_bundle(value: object) -> str:
    """An app's bundle or store id, trimmed (its case is kept: it is meaningful).

    Raises:
        BlockValueError: not a non-empty string of at most MAX_BUNDLE_CHARS printable
            characters without spaces.
    """
    if not isinstance(value, str):
        raise BlockValueError("must be a string")
    text = value.strip()
    if not text or len(text) > MAX_BUNDLE_CHARS or not text.isprintable() or " " in text:
        raise BlockValueError(f"must be 1 to {MAX_BUNDLE_CHARS} printable characters "
                              "without spaces")
    return text


def normalise_list(values: object, one: Callable[[object], str], limit: int
                   ) -> tuple[str, ...]:
    """``values`` normalised by ``one`` (a ``normalise_*`` function), duplicates dropped
    (first kept), at most ``limit`` of them.

    Raises:
        BlockValueError: a value of the wrong form (its index named), or too many.
    """
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise BlockValueError("must be a list of strings")
    out: dict[str, None] = {}
    for i, value in enumerate(values):
        try:
            out[one(value)] = None
        except BlockValueError as exc:
            raise BlockValueError(f"[{i}]: {exc}") from None
    if len(out) > limit:
        raise BlockValueError(f"at most {limit} distinct values, got {len(out)}")
    return tuple(out)


# --- matching -----------------------------------------------------------------------


def category_keys(category: str) -> tuple[str, ...]:
    """The ids whose block blocks ``category``: itself and each parent, nearest first
    (``IAB7-39`` → ``("IAB7-39", "IAB7")``). Exact text: callers compare canonical ids."""
    keys = [category]
    head, sep, _ = category.rpartition("-")
    while sep:
        keys.append(head)
        head, sep, _ = head.rpartition("-")
    return tuple(keys)


def domain_keys(domain: str) -> tuple[str, ...]:
    """The domains whose block blocks ``domain``: itself and each parent domain, nearest
    first, the bare top-level label left out (``www.ford.com`` → ``("www.ford.com",
    "ford.com")``). ``domain`` is canonical (lower case)."""
    labels = domain.split(".")
    return tuple(".".join(labels[i:]) for i in range(max(len(labels) - 1, 1)))


def request_category(value: str) -> str:
    """A request's blocked category as compared: trimmed, upper case (IAB ids are
    upper-case; another taxonomy's ids then never match an ad's IAB id)."""
    return value.strip().upper()


def request_domain(value: str) -> str:
    """A request's blocked domain as compared: the canonical form when it is a host
    name, else trimmed and lower case (it then matches nothing an ad declares)."""
    try:
        return normalise_domain(value)
    except BlockValueError:
        return value.strip().lower()


def ad_domains(adomain: tuple[str, ...], landing_url: str) -> tuple[str, ...]:
    """The advertiser domains a block list judges an ad by: those it declares
    (``adomain``), else its landing URL's host — the ``adomain`` an OpenRTB bid of it
    carries — compared as a request's blocked domain is (:func:`request_domain`:
    canonical when a host name, else lower case, e.g. an address); none without a host."""
    return tuple(adomain) if adomain else landing_domain(landing_url)


def landing_domain(landing_url: str) -> tuple[str, ...]:
    """The landing URL's host as a one-domain tuple (:func:`ad_domains`), () without
    one; the same tuple object for every URL of one authority (a catalogue holds many
    URLs of a few hosts: each authority is parsed once)."""
    found = _AUTHORITY.match(landing_url)
    return _authority_domain(found.group(1)) if found else ()


@functools.lru_cache(maxsize=65_536)
def _authority_domain(authority: str) -> tuple[str, ...]:
    try:
        host = urlsplit(f"//{authority}").hostname  # userinfo, port, brackets, case
    except ValueError:
        return ()
    return (request_domain(host),) if host else ()


def blocking_category(categories: Iterable[str], blocked: frozenset[str]) -> str | None:
    """The first blocked id (from ``blocked``) that blocks one of ``categories``, or None."""
    for category in categories:
        for key in category_keys(category):
            if key in blocked:
                return key
    return None


def blocking_domain(domains: Iterable[str], blocked: frozenset[str]) -> str | None:
    """The first blocked domain (from ``blocked``) that blocks one of ``domains``, or None."""
    for domain in domains:
        for key in domain_keys(domain):
            if key in blocked:
                return key
    return None

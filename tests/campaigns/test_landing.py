"""The URI form of landing URLs: IDNA hosts, UTF-8 percent-encoding once, ASCII untouched."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import idna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adfunnel.campaigns.landing import LandingUrlError, to_uri, uri_problem

ISSUE_URL = "https://www.bücher-müller.example/suche/straße?q=größe&x=1%202"


def test_the_issue_url() -> None:
    assert to_uri(ISSUE_URL) == (
        "https://www.xn--bcher-mller-thbg.example/suche/stra%C3%9Fe?q=gr%C3%B6%C3%9Fe&x=1%202"
    )


@pytest.mark.parametrize(
    ("iri", "uri"),
    [
        # UTS 46 maps case and the ideographic full stop, as browsers do
        ("https://BÜCHER.example/", "https://xn--bcher-kva.example/"),
        ("https://bücher。example/", "https://xn--bcher-kva.example/"),
        # non-transitional: ß stays ß (as in current browsers), not "ss"
        ("https://faß.de/", "https://xn--fa-hia.de/"),
        ("https://bücher.example.", "https://xn--bcher-kva.example."),
        # port and userinfo kept; non-ASCII userinfo percent-encoded
        ("https://üser:pä@bücher.example:8443/x", "https://%C3%BCser:p%C3%A4@xn--bcher-kva.example:8443/x"),
        # IPv6 literal host kept as written
        ("http://[2001:db8::1]:8080/ä?b=ö#ü", "http://[2001:db8::1]:8080/%C3%A4?b=%C3%B6#%C3%BC"),
        # an ASCII host is not re-cased when only the path is an IRI
        ("HTTPS://Shop.Example/Größe", "HTTPS://Shop.Example/Gr%C3%B6%C3%9Fe"),
        # no path: query and fragment straight after the host
        ("https://bücher.example?q=€", "https://xn--bcher-kva.example?q=%E2%82%AC"),
        ("https://bücher.example#ß", "https://xn--bcher-kva.example#%C3%9F"),
        # existing escapes and odd ASCII stay byte-identical next to new ones
        ("https://x.test/%E2%82%AC€|^%zz", "https://x.test/%E2%82%AC%E2%82%AC|^%zz"),
        # a non-BMP character is 4 UTF-8 bytes
        ("https://x.test/😀", "https://x.test/%F0%9F%98%80"),
    ],
)
def test_examples(iri: str, uri: str) -> None:
    assert to_uri(iri) == uri


@pytest.mark.parametrize(
    "url",
    [
        "https://x.test/p?a=1&b=2&c=%20",
        "HTTP://Example.TEST:8080/a/../b?q=%7e&x=%E2%82%AC#frag",
        "https://x.test/a|b^c{d}`e\\f",  # RedirectResponse would quote these
        "https://xn--bcher-kva.example/",
        "https://my_host.example/",  # not a valid IDN, but ASCII hosts are never checked
    ],
)
def test_ascii_urls_are_returned_as_given(url: str) -> None:
    assert to_uri(url) == url


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://-bücher.example/", "hyphen"),
        ("https://" + "ü" * 70 + ".example/", "too long"),
        ("https://bücher.example:8０/", "port"),
        ("https://x.test/\ud800", "surrogate"),
    ],
)
def test_urls_without_uri_form_are_refused(url: str, words: str) -> None:
    with pytest.raises(LandingUrlError) as exc:
        to_uri(url)
    assert words in exc.value.problem
    assert uri_problem(url) == exc.value.problem


def test_uri_problem_is_none_for_a_good_iri() -> None:
    assert uri_problem(ISSUE_URL) is None


# --- properties -----------------------------------------------------------------------

#: What a stored landing URL may hold (no lone surrogate, no ASCII control or space),
#: less the path's delimiters.
_URL_CHARS = st.characters(blacklist_categories=("Cs",)).filter(lambda c: c > " " and c != "\x7f")
_PATH_CHARS = _URL_CHARS.filter(lambda c: c not in "?#")
_ASCII = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
_BASE = st.sampled_from(["https://x.test", "http://bücher.example:8080", "https://[::1]"])


@given(st.text(_ASCII, max_size=80))
def test_ascii_urls_are_byte_identical(tail: str) -> None:
    url = "https://x.test/" + tail
    assert to_uri(url) == url


@given(_BASE, st.text(_PATH_CHARS, max_size=40), st.text(_PATH_CHARS, max_size=20))
def test_output_is_ascii_and_idempotent(base: str, path: str, query: str) -> None:
    uri = to_uri(f"{base}/{path}?{query}")
    assert uri.isascii()
    assert to_uri(uri) == uri  # percent-encoded once: a second pass changes nothing


@given(_BASE, st.text(_PATH_CHARS.filter(lambda c: c != "%"), max_size=40))
def test_decoding_the_path_gives_back_the_original(base: str, path: str) -> None:
    uri = to_uri(f"{base}/{path}")
    assert unquote(urlsplit(uri).path, errors="strict") == f"/{path}"


@given(st.lists(st.one_of(st.text(_PATH_CHARS.filter(lambda c: c != "%"), max_size=5),
                          st.from_regex(r"\A%[0-9A-Fa-f]{2}\Z")), max_size=12))
def test_existing_escapes_are_kept(parts: list[str]) -> None:
    """Each ASCII character, ``%XX`` included, reaches the output unchanged and in order."""
    path = "".join(parts)
    uri = to_uri("https://x.test/" + path)
    expected = "".join(c if c.isascii() else idna_free_quote(c) for c in path)
    assert uri == "https://x.test/" + expected


def idna_free_quote(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def test_the_host_is_what_idna_gives() -> None:
    host = "www.bücher-müller.example"
    assert urlsplit(to_uri(f"https://{host}/")).hostname == idna.encode(host, uts46=True).decode()

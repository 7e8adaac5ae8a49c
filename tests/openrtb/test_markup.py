"""The ``adm`` built from cached, token-free parts is exactly the markup built and
escaped whole, for every kind of creative, size and base URL."""

from __future__ import annotations

from adfunnel.campaigns.creative import HtmlCreative, ImageCreative, NativeCreative
from adfunnel.campaigns.model import Ad
from adfunnel.openrtb.markup import ad_markup, markup_parts, plain_markup
from adfunnel.tracking.notices import notice_urls

UPLOADED = "/creatives/files/" + "a" * 64 + ".png"  # stored relative to this server
TOKENS = ("eyJ2IjoxfQ.c2lnbmF0dXJl-_", "QUJD.REVG")
BASES = ("https://ads.test", "https://ads.test/", "")
CREATIVES = (
    ImageCreative("https://cdn.test/a.png?x=1&y=\"2\"", 300, 250, "Tom & <Jerry>"),
    NativeCreative("Title's", "Body & more", "Sponsor", "Go >", "https://cdn.test/n.png"),
    NativeCreative("No image", "b", "s", "c"),
    HtmlCreative("<div>anything</div>"),
    ImageCreative("https://cdn.test/b.png", 300, 250, "alt with a \x00 NUL"),
    ImageCreative(UPLOADED, 300, 250, "uploaded", upload_id="u1"),
    None,
)
REFS = ("https://cdn.test/ref.png", "http://plain.test/r.png", "upload:123")


def _ad(creative: object, ref: str) -> Ad:
    return Ad(id=1, campaign_id=2, landing_url="https://land.test/", creative_ref=ref,
              format="banner", width=300, height=250, creative=creative)  # type: ignore[arg-type]


def test_the_joined_parts_are_the_whole_build() -> None:
    """Breaks if a part is cached across sizes or bases (tried: ``width`` left out of
    ``markup_parts``' arguments, 300 always: the 728×90 build kept 300), or if a creative
    whose own text holds the placeholder is split there too (tried: the ``bare``
    comparison removed: the alt's NUL became a token), or if the token is not where
    the build puts it (tried: ``parts[::-1]``)."""
    checked = 0
    for creative in CREATIVES:
        for ref in REFS:
            for base in BASES:
                for w, h in ((300, 250), (728, 90)):
                    for token in TOKENS:
                        want = plain_markup(creative, ref, notice_urls(token, base), token,
                                            base, w, h)  # type: ignore[arg-type]
                        assert ad_markup(_ad(creative, ref), token, base, w, h) == want
                        checked += want is not None
    assert checked > 100


def test_the_parts_hold_the_token_slots_only() -> None:
    """The image markup of one creative: two token slots (click, impression beacon), the
    escaping done once in the parts. Breaks if the beacon's ``&`` is not escaped
    (tried: ``_a`` left off the pixel's URL)."""
    image = ImageCreative("https://cdn.test/a.png", 300, 250, "A & B")
    parts = markup_parts(image, "", "https://ads.test", 300, 250)
    assert parts is not None and len(parts) == 3
    assert parts[0].endswith('href="https://ads.test/c?t=')
    assert "alt=\"A &amp; B\"" in parts[1] and parts[1].endswith('src="https://ads.test/i?t=')
    assert parts[2].startswith("&amp;p=${AUCTION_PRICE}\"")
    assert markup_parts(ImageCreative("u", 1, 1, "\x00"), "", "", 1, 1) == ()
    assert markup_parts(None, "upload:1", "", 300, 250) is None


def test_an_uploads_image_is_served_under_the_base_url() -> None:
    """An upload's server-relative URL goes under the base URL (``public_base_url``),
    as the notice URLs do; an absolute one stays as it is. Breaks if the stored path is
    used as it is (tried: ``served_url`` left out of the image markup)."""
    uploaded = ImageCreative(UPLOADED, 300, 250, "u", upload_id="u1")
    for base in ("https://ads.test", "https://ads.test/"):
        adm = ad_markup(_ad(uploaded, ""), TOKENS[0], base, 300, 250)
        assert adm is not None and f'src="https://ads.test{UPLOADED}"' in adm
    adm = ad_markup(_ad(CREATIVES[4], ""), TOKENS[0], "https://ads.test", 300, 250)
    assert adm is not None and 'src="https://cdn.test/b.png"' in adm

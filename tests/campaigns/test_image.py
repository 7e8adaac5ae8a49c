"""An uploaded image is checked and re-encoded (``adfunnel.campaigns.image``): the four
formats made with Pillow here pass and keep their type and size; SVG, text, too many
bytes, pixels or frames are refused (413/422) before any pixel is decoded; EXIF and
bytes appended after the image are gone; animations keep their frames and timing."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image, ImageCms, PngImagePlugin

from adfunnel.campaigns.image import ImageLimits, ImageRefused, clean_image

LIMITS = ImageLimits(max_bytes=200_000, max_width=2_000, max_height=1_000,
                     max_pixels=1_000_000, max_frames=10)
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def make(fmt: str, size: tuple[int, int] = (60, 40), **save: object) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, fmt, **save)
    return out.getvalue()


def refused(data: bytes, limits: ImageLimits = LIMITS) -> ImageRefused:
    with pytest.raises(ImageRefused) as caught:
        clean_image(data, limits)
    return caught.value


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_format_is_accepted_and_keeps_its_type_and_size(fmt: str) -> None:
    clean = clean_image(make(fmt), LIMITS)
    assert (clean.content_type, clean.width, clean.height) == (FORMATS[fmt], 60, 40)
    with Image.open(io.BytesIO(clean.data)) as back:
        assert back.format == fmt and back.size == (60, 40)


def test_svg_and_text_are_refused_naming_svg() -> None:
    svg = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><script>' \
          b'alert(1)</script></svg>'
    problem = refused(svg)
    assert problem.status == 422 and "SVG" in problem.problem
    text = refused(b"hello, this is not an image\n" * 10)
    assert text.status == 422 and "PNG, JPEG, GIF or WebP" in text.problem
    assert refused(b"").status == 422
    assert refused(make("BMP")).status == 422  # a real image, not an accepted format


def test_over_the_byte_limit_is_413() -> None:
    small = ImageLimits(100, 2_000, 1_000, 1_000_000, 10)
    assert refused(make("PNG", (300, 300)) + b"\0" * 100, small).status == 413


def _png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims ``width`` x ``height`` (a decompression bomb's
    shape: a few bytes that would decode to billions of pixels)."""
    data = bytearray(make("PNG", (8, 8)))
    ihdr = 8 + 8  # signature, then length and type of the first chunk
    data[ihdr:ihdr + 8] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[12:ihdr + 13]))
    data[ihdr + 13:ihdr + 17] = struct.pack(">I", crc)
    return bytes(data)


def test_pixel_limits_refuse_before_decoding() -> None:
    assert "over the limit of 2000x1000" in refused(_png_claiming(2_001, 10)).problem
    assert "over the limit of 2000x1000" in refused(_png_claiming(10, 1_001)).problem
    assert "1500000 pixels" in refused(_png_claiming(1_500, 1_000)).problem


def test_a_bomb_beyond_pillows_own_guard_is_refused() -> None:
    lax = ImageLimits(200_000, 1_000_000, 1_000_000, 10**12, 10)
    problem = refused(_png_claiming(100_000, 100_000), lax)
    assert problem.status == 422 and "too many pixels" in problem.problem


def test_exif_and_appended_bytes_are_gone() -> None:
    exif = Image.Exif()
    exif[0x010F] = "SecretCam"  # make
    exif[0x8825] = {1: "N", 2: (48.0, 51.0, 29.0)}  # GPS
    jpeg = make("JPEG", exif=exif.tobytes()) + b"<script>alert(1)</script>"
    clean = clean_image(jpeg, LIMITS)
    assert b"SecretCam" not in clean.data and b"<script>" not in clean.data
    with Image.open(io.BytesIO(clean.data)) as back:
        assert "exif" not in back.info and not back.getexif()
    png = clean_image(make("PNG") + b"<script>alert(1)</script>", LIMITS).data
    assert png.endswith(b"IEND\xaeB`\x82") and b"<script>" not in png


def test_png_text_chunks_and_icc_profiles_are_gone() -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "SecretNote")
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = clean_image(make("PNG", pnginfo=info, icc_profile=icc), LIMITS).data
    with Image.open(io.BytesIO(data)) as back:
        assert "icc_profile" not in back.info and "Comment" not in back.info
    assert b"SecretNote" not in data


def test_jpeg_orientation_is_applied_before_the_exif_goes() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees to show
    clean = clean_image(make("JPEG", (60, 40), exif=exif.tobytes()), LIMITS)
    assert (clean.width, clean.height) == (40, 60)


@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_animations_keep_frames_durations_and_loop(fmt: str) -> None:
    frames = [Image.new("RGBA", (20, 20), (60 * i, 0, 0, 255)) for i in range(4)]
    out = io.BytesIO()
    frames[0].save(out, fmt, save_all=True, append_images=frames[1:],
                   duration=[50, 60, 70, 80], loop=3)
    clean = clean_image(out.getvalue(), LIMITS)
    assert clean.frames == 4
    with Image.open(io.BytesIO(clean.data)) as back:
        durations = []
        for i in range(back.n_frames):
            back.seek(i)
            back.load()
            durations.append(back.info["duration"])
        assert back.n_frames == 4 and back.info["loop"] == 3
    assert durations == [50, 60, 70, 80]
    many = io.BytesIO()
    frames[0].save(many, fmt, save_all=True, append_images=frames[1:] * 4)
    assert "13 frames" in refused(many.getvalue()).problem

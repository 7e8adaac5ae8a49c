"""An uploaded creative image, checked and re-encoded: what ``POST /v1/creatives`` stores.

:func:`clean_image` takes the bytes a client sent and returns new bytes of the same
image, or refuses it with :class:`ImageRefused` (an HTTP status and a problem, both about
the ``file`` field). Pure: bytes in, bytes out, no file or network I/O.

- **Type from content only.** Pillow identifies the image by its signature, and only
  the PNG, JPEG, GIF and WebP decoders are tried: a file's name and declared type are
  never read. SVG (markup that may carry scripts) and anything else is refused.
- **Limits before decoding.** The byte size first, then the header's width, height and
  pixel count (a decompression bomb is refused before its pixels exist), and the
  number of frames of an animation. Pillow's own bomb guard
  (``Image.MAX_IMAGE_PIXELS``) stays on behind ours.
- **Re-encoded.** The pixels are decoded and written anew into a fresh image, so EXIF
  (camera, GPS), XMP, ICC profiles, comments and anything appended after the image's
  end (a script polyglot) are gone. A JPEG's EXIF orientation is applied to the pixels
  first, so it still shows upright. Animated GIF and WebP keep their frames, frame
  durations and loop count. ICC profiles are dropped: browsers show untagged images
  as sRGB, the colour space ads are made in.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

#: Pillow format name -> (content type, file extension) of the formats accepted.
FORMATS: dict[str, tuple[str, str]] = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "GIF": ("image/gif", "gif"),
    "WEBP": ("image/webp", "webp"),
}
#: Content type -> file extension, and back (the served files' names end so).
EXTENSIONS = {ctype: ext for ctype, ext in FORMATS.values()}
CONTENT_TYPES = {ext: ctype for ctype, ext in EXTENSIONS.items()}
#: Lossy encoders' quality (JPEG, WebP), 0-100: visually lossless for ad images.
QUALITY = 90


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What an upload may be: ``max_bytes`` of file, ``max_width`` x ``max_height``
    pixels, ``max_pixels`` pixels in all (width x height), ``max_frames`` frames."""

    max_bytes: int
    max_width: int
    max_height: int
    max_pixels: int
    max_frames: int


@dataclass(frozen=True, slots=True)
class CleanImage:
    """The re-encoded image: its bytes, content type, extension and size in pixels."""

    data: bytes
    content_type: str
    extension: str
    width: int
    height: int
    frames: int


class ImageRefused(ValueError):
    """An upload refused: ``status`` 413 (too many bytes) or 422, ``problem`` about
    the ``file`` field."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


def clean_image(data: bytes, limits: ImageLimits) -> CleanImage:
    """The image in ``data`` re-encoded in its own format, without metadata.

    Raises:
        ImageRefused: 413 over ``limits.max_bytes``; 422 not a PNG, JPEG, GIF or WebP
            image (SVG named as such), over a pixel or frame limit, or undecodable.
    """
    if len(data) > limits.max_bytes:
        raise ImageRefused(413, f"over {limits.max_bytes} bytes")
    if not data:
        raise ImageRefused(422, "is empty")
    with warnings.catch_warnings():
        # Pillow warns past MAX_IMAGE_PIXELS; our own limit (lower) refuses instead
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=list(FORMATS))
        except Image.DecompressionBombError as exc:
            raise ImageRefused(422, f"too many pixels ({exc})") from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
            raise ImageRefused(422, _not_an_image(data)) from None
        with image:
            _check_size(image, limits)
            try:
                return _reencode(image)
            except Image.DecompressionBombError as exc:
                raise ImageRefused(422, f"too many pixels ({exc})") from None
            except (OSError, ValueError, SyntaxError, EOFError) as exc:
                raise ImageRefused(422, f"the image cannot be decoded ({exc})") from None


def _not_an_image(data: bytes) -> str:
    head = data[:1024].lstrip().lower()
    if head.startswith((b"<svg", b"<?xml", b"<!doctype svg")) or b"<svg" in head:
        return "SVG is not accepted (it may carry scripts): upload PNG, JPEG, GIF or WebP"
    return "not a PNG, JPEG, GIF or WebP image (the type is read from the content)"


def _check_size(image: Image.Image, limits: ImageLimits) -> None:
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageRefused(422, "has no pixels")
    if width > limits.max_width or height > limits.max_height:
        raise ImageRefused(422, f"{width}x{height} pixels is over the limit of "
                                f"{limits.max_width}x{limits.max_height}")
    if width * height > limits.max_pixels:
        raise ImageRefused(422, f"{width * height} pixels is over the limit of "
                                f"{limits.max_pixels}")
    frames = getattr(image, "n_frames", 1)  # read from headers, nothing decoded yet
    if frames > limits.max_frames:
        raise ImageRefused(422, f"{frames} frames is over the limit of {limits.max_frames}")


def _reencode(image: Image.Image) -> CleanImage:
    fmt = image.format or ""
    content_type, extension = FORMATS[fmt]
    frames = getattr(image, "n_frames", 1)
    out = io.BytesIO()
    if frames > 1 and fmt in ("GIF", "WEBP"):
        _save_animation(image, fmt, out)
        width, height = image.size
    else:  # a JPEG's orientation applied: a quarter turn swaps its sides
        still = _fresh(ImageOps.exif_transpose(image) if fmt == "JPEG" else image, fmt)
        _save_still(still, fmt, out)
        (width, height), frames = still.size, 1
    return CleanImage(out.getvalue(), content_type, extension, width, height, frames)


#: Modes each encoder writes as they are; other modes are converted first.
_MODES = {"PNG": {"1", "L", "LA", "P", "RGB", "RGBA", "I;16"},
          "JPEG": {"L", "RGB"}, "GIF": {"L", "P"}, "WEBP": {"RGB", "RGBA"}}


def _fresh(image: Image.Image, fmt: str) -> Image.Image:
    """A new image of ``image``'s pixels (and palette) with no metadata but its
    transparency."""
    image.load()
    if image.mode not in _MODES[fmt]:
        alpha = "A" in image.mode or "transparency" in image.info
        image = image.convert("RGBA" if alpha and fmt != "JPEG" else "RGB")
    fresh = Image.frombytes(image.mode, image.size, image.tobytes())
    if image.mode == "P":
        palette = image.getpalette()
        if palette is not None:
            fresh.putpalette(palette)
    if "transparency" in image.info and image.mode in ("P", "L", "RGB"):
        fresh.info["transparency"] = image.info["transparency"]
    return fresh


def _save_still(image: Image.Image, fmt: str, out: io.BytesIO) -> None:
    if fmt == "JPEG":
        image.save(out, "JPEG", quality=QUALITY)
    elif fmt == "WEBP":
        image.save(out, "WEBP", quality=QUALITY)
    else:
        image.save(out, fmt)


def _save_animation(image: Image.Image, fmt: str, out: io.BytesIO) -> None:
    frames: list[Image.Image] = []
    durations: list[int] = []
    for frame in ImageSequence.Iterator(image):
        frames.append(_fresh(frame.convert("RGBA"), "WEBP"))
        durations.append(int(frame.info.get("duration", 100) or 100))
    options = {"save_all": True, "append_images": frames[1:], "duration": durations,
               "loop": int(image.info.get("loop", 0))}
    if fmt == "GIF":
        frames[0].save(out, "GIF", disposal=2, **options)
    else:
        frames[0].save(out, "WEBP", quality=QUALITY, **options)

"""An ad's ``creative`` as the API takes it: from :class:`~adfunnel.api.schemas.CreativeIn`
to the domain creative (``adfunnel.campaigns.creative``), an image's ``upload_id`` made
into its public URL.

The domain checks which fields each type needs (422 naming ``creative.<field>``); here
only what the store cannot know: an image gives exactly one of ``url`` and ``upload_id``,
and an ``upload_id`` names an upload this server holds.
"""

from __future__ import annotations

from collections.abc import Callable

from adfunnel.api.schemas import CreativeIn
from adfunnel.campaigns.creative import Creative, creative_from_plain
from adfunnel.http_errors import validation_error

#: upload id -> its public URL, or None for an unknown upload.
UploadUrl = Callable[[str], str | None]


def creative_of(given: CreativeIn, upload_url: UploadUrl | None = None) -> Creative:
    """The domain creative of an API body.

    Raises:
        ApiError: 422 for an image with both or neither of ``url`` and ``upload_id``, or
            an unknown upload.
        InvalidChange: a field its type does not have or lacks (``creative.<field>``).
    """
    plain = given.model_dump(exclude_none=True)
    if given.type == "image":
        if (given.url is None) == (given.upload_id is None):
            raise validation_error(("creative.url", "give exactly one of url and upload_id"))
        if given.upload_id is not None:
            url = upload_url(given.upload_id) if upload_url is not None else None
            if url is None:
                raise validation_error(("creative.upload_id", "no such upload"))
            plain["url"] = url  # kept beside upload_id: the answer carries a URL
    return creative_from_plain(plain)

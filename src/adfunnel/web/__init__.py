"""The web page side of the ad server: the JavaScript ad tag (``GET /tag.js``), the frame
an html creative is shown in (``GET /f``), and the demo article page (``/demo``) with
the demo advertiser, placements and campaigns it is filled from.

Files served live under ``adfunnel/static/tag`` and ``adfunnel/static/demo`` (package
data); nothing here is built at import time.
"""

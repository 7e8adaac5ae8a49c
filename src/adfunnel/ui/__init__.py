"""The dashboard at ``/ui``: server-rendered pages for advertisers, reviewers and
operators.

Jinja2 templates with htmx for the forms and uPlot for the pacing chart, both vendored
under ``static/vendor`` (nothing is fetched from a CDN). Mount it with
:func:`adfunnel.ui.mount.install_ui`; routes in :mod:`adfunnel.ui.routes`, the delivery
status rules in :mod:`adfunnel.ui.delivery`.
"""

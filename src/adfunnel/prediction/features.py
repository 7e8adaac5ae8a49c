"""The click model's features: the ``field=value`` tokens of a request and a candidate.

The request path (:mod:`adfunnel.prediction.scorer`) and the trainer
(:func:`adfunnel.learn.datasets.served_tokens`) build a served winner's tokens with the
same two functions, so the model is scored on exactly what it was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def request_tokens(placement: object, position: object, exchange: object, domain: object,
                   hour: object, attributes: Mapping[str, Any]) -> list[str]:
    """The tokens every candidate of a request (and slot position) shares: placement,
    position, exchange, domain, UTC hour, the user's attributes, placement × position."""
    row = [f"placement={placement}", f"position={position}", f"exchange={exchange}",
           f"domain={domain}", f"hour={hour}", f"placement_x_position={placement}|{position}"]
    for name, value in sorted(attributes.items()):
        values = value if isinstance(value, list | tuple) else [value]
        row += [f"attr.{name}={v}" for v in values]
    return row


def candidate_tokens(placement: object, ad_id: object, campaign_id: object,
                     advertiser_id: object, bid_type: object) -> list[str]:
    """A candidate's own tokens: ad, campaign, advertiser, bid type, placement × ad."""
    return [f"ad_id={ad_id}", f"campaign_id={campaign_id}", f"advertiser_id={advertiser_id}",
            f"bid_type={bid_type}", f"placement_x_ad={placement}|{ad_id}"]

"""The OpenRTB 2.6 bidder endpoint: ``POST /openrtb2/bid`` (README: "OpenRTB")."""

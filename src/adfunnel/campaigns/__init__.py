"""The advertiser side: model, validation, store, change log and API routes."""

"""Sources: collectors that put records on the raw topics."""

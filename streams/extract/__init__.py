"""Extract: raw shipper records → normalised log lines → typed signals, by rules kept as data."""

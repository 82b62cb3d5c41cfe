"""Running it: versions and backfill, verify, status, first run and demo data."""

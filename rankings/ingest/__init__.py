"""The write path's entrance: sale events validated and stored as raw sales (API and imports)."""

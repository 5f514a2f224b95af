"""`greenadapt qa` (being written)."""

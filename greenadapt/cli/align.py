"""`greenadapt align` (being written)."""

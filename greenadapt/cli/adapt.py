"""`greenadapt adapt` (being written)."""

"""`greenadapt expand` (being written)."""

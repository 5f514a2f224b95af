"""`greenadapt w2v` (being written)."""

"""`greenadapt predict` (being written)."""

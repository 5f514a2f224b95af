"""`greenadapt finetune` (being written)."""

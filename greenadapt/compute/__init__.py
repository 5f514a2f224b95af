"""What training and inference both run on, below both: processes, devices and precision (``distributed``), units
into padded batches (``batches``), the two tokenizers' views pooled (``pooling``), the health of a model's outputs
(``health``) and the options they share (``settings``). Using a model imports nothing from ``greenadapt.training``."""

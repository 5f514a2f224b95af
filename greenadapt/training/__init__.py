"""What every training loop shares (fine-tuning, QA, masked-LM pretraining, multitask). Where a process runs (rank,
world size, device, mixed precision), batches and the views' pooling are :mod:`greenadapt.compute`'s, which inference
uses too.

- ``checkpoint``: resumable checkpoints written atomically and verified, random
  states included; pre-emption by SIGTERM.
- ``step``: the end of an optimizer step — unscaling fp16 gradients, clipping,
  stepping every optimizer and scheduler — the one place gradients are clipped.
"""

"""The model-side pieces every training command shares.

- ``units``: each example tokenized by both tokenizers (T̂ and T_LM), words aligned to wordpieces;
- ``embeddings``: the split word embeddings that keep a very large added vocabulary cheap to train;
- ``gmap/``: G-MAP, a frozen general model's hidden states as memory (``wiring``: how finetune and predict use it);
- ``pals/``: projected attention layers and a head per task, for ``multitask``.
"""

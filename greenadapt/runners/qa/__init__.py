"""Extractive question answering over whole documents with one or two tokenizers.

``data`` reads SQuAD v1/v2 JSON, ``windows`` plans the centred sliding
windows, ``words`` maps wordpieces to whitespace/punctuation words,
``infer`` runs the model over batched windows, ``answer`` finds the best
spans, ``metrics`` scores them, ``run`` is the ``greenadapt qa`` stage and
``train`` fine-tunes a model on SQuAD-style data.

Kept import-free so ``greenadapt --help`` does not load numpy or torch.
"""

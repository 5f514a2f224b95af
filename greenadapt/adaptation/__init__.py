"""Teaching a model a domain's words on the CPU: ``w2v`` → ``align`` → ``expand`` (and ``adapt``, all three).

- ``w2v``: CBOW word2vec on the corpus, over the model's own words (``context_vectors``
  for ``--method context-mean``); ``vectors`` reads and writes the vectors.
- ``align``: the map from word2vec space into the model's wordpiece-embedding space,
  fitted on the words both share; ``methods/`` holds one module per init method.
- ``expand``: the new embedding rows and the domain tokenizer (``domain_tokenizer``),
  written as a folder transformers loads.
- ``pipeline``: the three stages in one call (``greenadapt adapt``).

Imports go down only: to ``corpus``, ``artifacts``, ``machine`` and the root modules.
"""

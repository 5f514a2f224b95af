"""The adaptation commands as functions: ``w2v``, ``align``, ``expand`` and ``adapt`` (all three).

Each is made from its command's settings class (:mod:`greenadapt.adaptation.settings`): the keywords, names
and defaults of the command line's options (``greenadapt.w2v(corpus, epochs=5, ...)``).
"""

from __future__ import annotations

from greenadapt.adaptation.settings import AdaptSettings, AlignSettings, ExpandSettings, SecondViewSettings, W2vSettings
from greenadapt.api.build import command_function

__all__ = ["adapt", "align", "expand", "second_view", "w2v"]

adapt = command_function(AdaptSettings, "greenadapt.adaptation.pipeline:run_adapt", """\
Adapt ``model`` (default: the bundled all-MiniLM-L6-v2) to ``corpus``: word2vec, align, expand.

``corpus``: registered corpus names, files, folders, globs or URLs. The
adapted model is written to ``out`` (default: the workspace's expand
folder); ``.expand.path`` of the result is the folder to fine-tune.
Finished stages are reused unless ``force``. ``w2v_draws`` > 1: word2vec is trained that many times (seeds
``seed``, ``seed + 1``, ...), each draw aligned, and each new row is the mean of the draws' rows.
""")

w2v = command_function(W2vSettings, "greenadapt.adaptation.w2v:run_w2v", """\
CBOW word2vec on ``corpus`` over ``model``'s own words (pre-tokenized with its normalizer, cached).

``source="context"``: the base model's contextual vectors instead (for ``align(method="context-mean")``);
``no_vectors``: only count the words (for ``subword-mean`` and ``random``).
""")

align = command_function(AlignSettings, "greenadapt.adaptation.align:run_align", """\
Fit ``method`` on the words word2vec (folder ``w2v``, or the workspace's for ``corpus``) and the model share.

``probe``: words whose nearest neighbours the align report lists.
""")

expand = command_function(ExpandSettings, "greenadapt.adaptation.expand:run_expand", """\
Add the aligned vectors of new words (folder ``align``, or the workspace's for ``corpus``) as embedding rows,
with a domain tokenizer that keeps them whole; ``.path`` of the result is a folder transformers loads.
``also_align``: other word2vec draws' align folders; each new row is then the mean of the draws' rows.
""")

second_view = command_function(SecondViewSettings, "greenadapt.adaptation.views:run_second_view", """\
``model`` with a second tokenizer over its own vocabulary: no corpus, no new rows (the control for two-view averaging).

The second tokenizer never uses a seeded fraction ``drop`` of the vocabulary's pieces of two characters or more, so
words with such a piece are cut otherwise; ``.path`` of the result is a two-tokenizer folder ``finetune`` trains on
both views and every reader mean-pools.
""")

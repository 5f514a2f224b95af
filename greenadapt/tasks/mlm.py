"""Masked-LM continued pretraining (``greenadapt pretrain``): the DAPT comparator, and new rows refined in context.

Reader: the corpus pre-tokenized and packed into sequences of ``max_length``
wordpieces (:class:`greenadapt.runners.pretrain.data.PackedCorpus`), a held-out share
kept apart. Head: the model's own masked-LM head applied to the masked rows
only (:func:`greenadapt.runners.pretrain.train.build_masked_lm`). Collator: BERT's
80/10/10 masking of 15% of the pieces, drawn from (seed, epoch, sequence)
(:func:`greenadapt.runners.pretrain.data.masked_batch`). Metric: held-out masked-LM
loss and perplexity (:func:`greenadapt.runners.pretrain.train.heldout_loss`).

It is not a ``finetune --task`` (it has no runner): ``pretrain`` trains it, with these defaults.
"""

from __future__ import annotations

from greenadapt.defaults import DEFAULT_MAX_LENGTH
from greenadapt.tasks.base import Task, TaskDefaults


class MlmTask(Task):
    name = "mlm"
    summary = "masked-LM continued pretraining on a corpus (`greenadapt pretrain`); held-out loss and perplexity"
    finetunes = False
    defaults = TaskDefaults(epochs=1, batch_size=32, lr=5e-5, max_length=DEFAULT_MAX_LENGTH)


MLM = MlmTask()

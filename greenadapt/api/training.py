"""The training commands as functions: ``finetune``, ``qa``, ``multitask``, ``pretrain`` and ``compare``.

Each is made from its command's settings class: the keywords, names and defaults of the command line's options.
"""

from __future__ import annotations

from greenadapt.api.build import command_function
from greenadapt.comparison.settings import CompareSettings
from greenadapt.runners.finetune.settings import FinetuneSettings
from greenadapt.runners.multitask.settings import MultitaskSettings
from greenadapt.runners.pretrain.settings import PretrainSettings
from greenadapt.inference.qa.settings import QaSettings

__all__ = ["compare", "finetune", "multitask", "pretrain", "qa"]

finetune = command_function(FinetuneSettings, "greenadapt.runners.finetune.run:run_finetune", """\
Fine-tune ``model`` on ``task`` (``ner``, ``classify`` or ``qa``) with both tokenizers; evaluate mean-pooled.

``seeds`` trains one model per seed (mean ± std reported); otherwise one
model with ``seed``. ``epochs``, ``batch_size``, ``lr``, ``max_length`` and
``max_words`` left at None take the task's defaults (``greenadapt.tasks``:
ner and classify 3 epochs, batch 32, lr 5e-5, 128 wordpieces; qa 2, 16,
3e-5 and the model's length); ``pool`` None: mean with two tokenizers.
The result's ``.path`` is the run folder to :func:`load`.
""")

qa = command_function(QaSettings, "greenadapt.inference.qa.run:run_qa", """\
Answer every question of a SQuAD-style file over its whole document; predictions and metrics go to ``out``.

``pool`` ``None``: mean of both tokenizers for an expanded model, the
one tokenizer of a plain model. To answer questions from code, use
``load(path).answer(question, context)``.
""")

compare = command_function(CompareSettings, "greenadapt.comparison.run:run_compare", """\
Fine-tune every model of ``models`` (name → folder or Hub id) on ``task`` with one recipe and the same ``seeds``,
and compare each with ``against`` (default: the first), paired by seed and by test example.

Returns a :class:`~greenadapt.comparison.run.CompareResult`: ``.pairs[i].verdict()`` is the one-line answer,
e.g. ``green vs base: +0.98 F1 [-0.01, +1.54] over 3 seeds; not significant at 95%``; ``out/compare.json``
holds everything. A rerun skips finished fine-tunings and resumes interrupted ones.
``adapt_methods`` with ``corpus``: the first model is adapted to ``corpus`` once per method (into
``out/adapted/<method>``) and each result joins the comparison under its method's name.
``ensembles`` (name → N): that model is N fine-tunings per seed (member j with seed + j × 100,000), scored on the
mean of their probabilities; its cost counts every member. ``{"base-x2": 2}`` with ``models["base-x2"]`` the
base model is the compute-matched control for a two-view model. ``entity_type``, ``max_steps``, ``precision``,
``pad_to_multiple``, ``cuda_graphs`` and ``report_to`` are finetune's, for every run.
""")

multitask = command_function(MultitaskSettings, "greenadapt.runners.multitask.run:run_multitask", """\
Multi-task fine-tuning with PALs: one shared encoder, a projected-attention adapter and a head per task.

``task``: each task as comma-separated key=value pairs (``name=ncbi,type=ner,train=train.tsv,dev=dev.tsv``),
or ``tasks_file``, a TOML file of ``[[task]]`` tables with the same keys. Per-task scores, their average
and the parameter count are in the result's manifest.
""")

pretrain = command_function(PretrainSettings, "greenadapt.runners.pretrain.run:run_pretrain", """\
Continue masked-LM training of ``model`` on ``corpus`` (the DAPT comparator); the output loads in
``finetune``, ``qa``, ``expand`` and transformers.

``eval_only``: train nothing; return each corpus's held-out masked-LM loss and perplexity (a dict,
``{"results": {corpus: {"loss", "perplexity", "targets"}}, ...}``) instead of a stage outcome.
""")

"""Using a fine-tuned folder: ``load``, ``pipeline`` and ``predict``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.api.build import command_function
from greenadapt.api.common import PathLike
from greenadapt.inference.settings import EvaluateSettings, PredictSettings
from greenadapt.inference.onnx_export import ExportSettings

if TYPE_CHECKING:
    from greenadapt.inference.predictor import ClassifierModel, NerModel, QaModel

__all__ = ["evaluate", "export", "load", "pipeline", "predict"]


def load(
    path: PathLike | Sequence[PathLike],
    *,
    device: str = "auto",
    pool: str = "mean",
    batch_size: int = 64,
    precision: str = "auto",
    general_model: str | None = None,
    max_length: int | None = None,
    runtime: str = "auto",
    quantize: str = "none",
    threads: int = 0,
) -> NerModel | ClassifierModel | QaModel:
    """A fine-tuned model folder as an object: ``.predict(texts)`` (NER, classification) or ``.answer(q, context)`` (QA).

    Predictions are mean-pooled over both tokenizers, as greenadapt reports
    them; NER entities carry character offsets into the given text.
    ``path``: a list of folders (fine-tuned on one task and label set) is an ensemble: one model whose label
    probabilities are the mean of its members'. ``max_length``: question answering's window (default: the model's).
    ``runtime="onnx"``: ONNX Runtime on the CPU (``greenadapt[onnx]``), the model exported once and cached beside its
    weights; ``quantize="int8"`` its int8 form. ``threads``: torch's CPU threads (0: at most the cores this process
    may use, cgroup quota included).
    """
    from greenadapt.inference.labelling import ensemble_members, find_model_folder
    from greenadapt.inference.settings import LoadSettings
    from greenadapt.inference.predictor import open_ensemble
    from greenadapt.options import declared_fields

    given = locals()
    founds = [find_model_folder(member) for member in ensemble_members(path)]
    # every LoadSettings option is a keyword here, with its default (tests/test_defaults.py holds them equal)
    options = LoadSettings(**{field.name: given[field.name] for field, _ in declared_fields(LoadSettings)})
    return open_ensemble(founds, options=options, max_length=max_length)


def pipeline(task: str, model: PathLike | Sequence[PathLike], **options: Any) -> Any:
    """A ``transformers.Pipeline`` over a fine-tuned greenadapt folder, with greenadapt's dual-tokenizer inference.

    ``task``: ``token-classification`` (alias ``ner``), ``text-classification``
    (``classify``) or ``question-answering`` (``qa``); it must match the
    folder's task. No ``trust_remote_code`` is involved: the pipeline class
    is greenadapt's own. ``options`` are :func:`load`'s (device, pool, batch_size, ...) and the
    call options of transformers' pipeline of the task (``aggregation_strategy``, ``ignore_labels``,
    ``is_split_into_words``; ``top_k``; ``function_to_apply``), which every call then uses; any other is
    refused here in one line. ``model``: a list of folders is an ensemble (see :func:`load`).
    """
    from greenadapt.inference.hf_pipeline import open_pipeline

    return open_pipeline(task, model, **options)


predict = command_function(PredictSettings, "greenadapt.inference.predict_text:run_predict", """\
Label ``source`` with a fine-tuned ``model`` folder (mean-pooled over both tokenizers) into ``output``.

``source``: raw text (a document per line), JSON lines, a folder of ``.txt`` files, a task file, or ``-``
(stdin); ``output`` ``-`` is stdout. ``task`` names the task of a multitask run. ``model``: a list of
folders is an ensemble (the mean of their probabilities). Returns the summary
(``.examples``, ``.entities``, ``.metrics`` where the input had labels; ``.to_json()``).
""")

evaluate = command_function(EvaluateSettings, "greenadapt.inference.evaluation:run_evaluate", """\
Score a fine-tuned ``model`` folder (a list: an ensemble) on the labelled file ``data``, without training
and without writing predictions: its metrics under each pooling mode (``pool`` limits them; default every
mode the model has). Returns an :class:`~greenadapt.inference.evaluation.EvaluateResult` (``.scores[pool]``,
``.to_json()``); its repr shows the headline figure.
""")

export = command_function(ExportSettings, "greenadapt.inference.onnx_export:run_export", """\
A fine-tuned NER or classification folder as a self-contained ONNX folder (``onnx=True``, ``out`` required): the
ONNX file(s) (``quantize``: fp32, int8 or both), both tokenizers, the labels, ``pooling.json`` (the recipe written
down) and ``serve_onnx.py``, which gives ``greenadapt predict``'s entities with onnxruntime and tokenizers alone.
Needs ``greenadapt[onnx]``.
""")

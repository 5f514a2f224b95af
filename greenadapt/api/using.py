"""Using a fine-tuned folder: ``load``, ``pipeline`` and ``predict``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from greenadapt.api.build import command_function
from greenadapt.api.common import PathLike
from greenadapt.inference.settings import EvaluateSettings, PredictSettings
from greenadapt.inference.onnx_export import ExportSettings
from greenadapt.inference.qa.settings import LoadOptions
from greenadapt.artifacts.info import InfoSettings
from greenadapt.reporting.settings import ReportSettings

if TYPE_CHECKING:
    from greenadapt.inference.predictor import ClassifierModel, NerModel, QaModel

__all__ = ["evaluate", "export", "info", "load", "pipeline", "predict", "report"]


P = ParamSpec("P")
R = TypeVar("R")


def _keywords_of(
    settings_class: Callable[P, Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[PathLike | Sequence[PathLike], P], R]]:
    """``function(path, **keywords)`` typed with ``settings_class``' fields as its keywords, for type checkers and
    editors (the dataclass's own signature), and the same as its runtime signature, for ``help()``: one declaration."""

    def typed(function: Callable[..., R]) -> Callable[Concatenate[PathLike | Sequence[PathLike], P], R]:
        import inspect

        from greenadapt.api.build import keyword_parameters

        # (a Settings class, typed above as its constructor so that P is its keywords)
        keywords = keyword_parameters(settings_class)  # type: ignore[arg-type]
        path = inspect.Parameter("path", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="PathLike | Sequence[PathLike]")
        returns = inspect.signature(function).return_annotation
        function.__signature__ = inspect.Signature([path, *keywords], return_annotation=returns)  # type: ignore[attr-defined]
        return function

    return typed


@_keywords_of(LoadOptions)
def load(path: PathLike | Sequence[PathLike], **keywords: Any) -> NerModel | ClassifierModel | QaModel:
    """A fine-tuned model folder as an object: ``.predict(texts)`` (NER, classification) or ``.answer(q, context)`` (QA).

    Predictions are mean-pooled over both tokenizers, as greenadapt reports
    them; NER entities carry character offsets into the given text.
    ``path``: a list of folders (fine-tuned on one task and label set) is an ensemble: one model whose label
    probabilities are the mean of its members'. The keywords are :class:`~greenadapt.inference.qa.settings.LoadOptions`'
    (each declared once, with the command line's defaults): ``runtime`` auto (the fastest for this CPU kind with fp32's
    answers, the same in any batch), torch or onnx (ONNX Runtime on the CPU, ``greenadapt[onnx]``, the model exported
    once and cached beside its weights; ``quantize="int8"`` its int8 form); ``threads``: torch's CPU threads (0: at
    most the cores this process may use, cgroup quota included); ``max_length`` and ``max_answer_chars``: a
    question-answering model's window (default: the model's) and longest answer; ``task``: the task of a multitask
    run folder to load (its NER or classification model, as a fine-tuned folder's).
    """
    from greenadapt.inference.labelling import ensemble_members, find_model_folder
    from greenadapt.inference.multitask import multitask_run, open_task
    from greenadapt.inference.predictor import open_ensemble

    options = LoadOptions(**keywords)
    members = ensemble_members(path)
    run = multitask_run(members, options.task)
    if run is not None:
        return open_task(run, options.task, options)
    founds = [find_model_folder(member) for member in members]
    return open_ensemble(founds, options=options)


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

info = command_function(InfoSettings, "greenadapt.artifacts.info:run_info", """\
What a folder greenadapt wrote (or a model folder) is, as a dict (what ``greenadapt info --json`` prints): its
stage, method, figures, parent artifacts, scores, cost and warnings; a compare folder's verdicts or progress.
``check_files=True`` also verifies every file against the manifest's checksums (``["check"]["ok"]``).
""")

report = command_function(ReportSettings, "greenadapt.reporting.settings:run_report", """\
The report's data over run folders (what ``greenadapt report --json`` prints): stage costs beside the paper's,
alignment, results over seeds per pooling mode, training curves, warnings, compare verdicts; ``html`` also writes
the self-contained page. ``greenadapt.reporting.markdown(data)`` renders it as the command prints it.
""")

"""``greenadapt.pipeline``: transformers ``Pipeline`` classes with greenadapt's dual-tokenizer inference.

transformers' own pipeline of a task would read only the domain tokenizer
at the folder's root, so it would score below what greenadapt reports.
These pipeline classes are greenadapt's own (no ``trust_remote_code``
through ``greenadapt.pipeline``; ``transformers.pipeline(...,
trust_remote_code=True)`` reaches them through :class:`TransformersEntry`
and the folder's ``greenadapt_pipeline.py``): each wraps the :mod:`greenadapt.inference.predictor` object
for the folder, so a pipeline call gives exactly ``greenadapt.load(folder)``'s
mean-pooled predictions, in the output shape of the transformers pipeline
of the same task:

- ``token-classification``: per text, ``[{entity_group, score, word, start, end}]``
  (whole entities, as transformers' ``aggregation_strategy="simple"``).
  ``is_split_into_words=True`` takes lists of words; offsets then refer to
  the words joined by single spaces.
- ``text-classification``: ``{label, score}``, or every label with ``top_k=None``.
- ``question-answering``: ``pipe(question=..., context=...)`` → ``{score, start, end, answer}``.

A list input is predicted in batches in one call (the pooled logits of a
batch are the same as one at a time); single inputs run through the
standard ``preprocess`` → ``_forward`` → ``postprocess`` steps.
"""

from __future__ import annotations

from typing import Any

from transformers import Pipeline

from greenadapt.errors import UsageError
from greenadapt.tasks import TASKS

# transformers' task name or greenadapt's, either way: each names one task of the registry.
HF_TASK = {name: task.pipeline_tag for name, task in TASKS.items()}
TASK_ALIASES = {**{name: name for name in TASKS}, **{tag: name for name, tag in HF_TASK.items()}}


# transformers' entity grouping: greenadapt's predictions are already pooled per word and grouped into whole
# entities, so each of these gives the same entities; "none" (one result per wordpiece) has no pooled meaning.
ENTITY_AGGREGATIONS = ("simple", "first", "average", "max")


class _GreenadaptPipeline(Pipeline):
    """The steps every greenadapt pipeline shares: hand the input to the predictor, return its answer.

    ``call_defaults``: keyword arguments of transformers' pipeline of the same task given when the pipeline
    is made (``pipeline(..., aggregation_strategy="simple")``); every call uses them unless it overrides them.
    """

    def __init__(self, predictor: Any, call_defaults: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.predictor = predictor
        self.call_defaults = dict(call_defaults or {})
        super().__init__(model=predictor.model, tokenizer=_as_transformers(predictor.general_tokenizer), device=predictor.model.device,
                         **kwargs)
        self._predict([], **self.call_defaults)  # refuses an option it does not take now, not at the first call

    def _with_defaults(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**self.call_defaults, **kwargs}

    def _sanitize_parameters(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        return kwargs, {}, {}

    def preprocess(self, input_: Any, **params: Any) -> dict[str, Any]:
        return {"input": input_, "params": params}

    # transformers' Pipeline types these for its own model outputs; ours carry greenadapt's predictions.
    def _forward(self, model_inputs: dict[str, Any], **forward_params: Any) -> dict[str, Any]:  # type: ignore[override]
        return {"output": self._predict([model_inputs["input"]], **model_inputs["params"])[0]}

    def postprocess(self, model_outputs: dict[str, Any], **postprocess_params: Any) -> Any:
        return model_outputs["output"]

    def _predict(self, inputs: list[Any], **params: Any) -> list[Any]:
        raise NotImplementedError


def _as_transformers(tokenizer: Any) -> Any:
    """transformers' own tokenizer for the pipeline's ``.tokenizer`` (its callers use transformers' API), where greenadapt
    read it from its files for inference (:class:`~greenadapt.artifacts.saved_tokenizer.SavedTokenizer`)."""
    from greenadapt.artifacts.pretrained import load_fast_tokenizer
    from greenadapt.artifacts.saved_tokenizer import SavedTokenizer

    return load_fast_tokenizer(tokenizer.path) if isinstance(tokenizer, SavedTokenizer) else tokenizer


class GreenadaptTokenClassificationPipeline(_GreenadaptPipeline):
    def __call__(self, inputs: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # one input or a list, as transformers' own
        kwargs = self._with_defaults(kwargs)
        split = kwargs.get("is_split_into_words", False)
        batched = isinstance(inputs, list) and (not split or (inputs and isinstance(inputs[0], list | tuple)))
        if batched:
            return self._predict(list(inputs), **kwargs)
        return super().__call__(inputs, **kwargs)

    def _predict(
        self, inputs: list[Any], is_split_into_words: bool = False, aggregation_strategy: str = "simple",
        ignore_labels: list[str] | None = None, **unused: Any,
    ) -> list[Any]:
        _refuse(unused, "token-classification")
        if str(aggregation_strategy).lower() not in ENTITY_AGGREGATIONS:
            raise UsageError(
                f"aggregation_strategy={aggregation_strategy!r}: greenadapt pools its predictions per word, "
                "so it gives whole entities only",
                hint=f"use one of {', '.join(ENTITY_AGGREGATIONS)} (the same entities)",
            )
        if not inputs:
            return []
        predicted = self.predictor.predict_words(inputs) if is_split_into_words else self.predictor.predict(inputs)
        skip = set(ignore_labels or ())
        return [[_hf_entity(e) for e in entities if e.label not in skip] for entities in predicted]


class GreenadaptTextClassificationPipeline(_GreenadaptPipeline):
    def __call__(self, inputs: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # one input or a list, as transformers' own
        kwargs = self._with_defaults(kwargs)
        if isinstance(inputs, list):
            return self._predict(list(inputs), **kwargs)
        return super().__call__(inputs, **kwargs)

    def _predict(self, inputs: list[Any], top_k: int | None = 1, function_to_apply: str = "softmax", **unused: Any) -> list[Any]:
        _refuse(unused, "text-classification")
        if str(function_to_apply).lower() not in ("softmax", "default"):
            raise UsageError(f"function_to_apply={function_to_apply!r}: greenadapt's scores are the softmax of the pooled logits",
                             hint="leave it out, or pass 'softmax'")
        if not inputs:
            return []
        texts, pairs = [], []
        for item in inputs:
            if isinstance(item, dict):  # transformers' sentence-pair form
                texts.append(item["text"])
                pairs.append(item.get("text_pair"))
            else:
                texts.append(item)
                pairs.append(None)
        if any(p is not None for p in pairs) and any(p is None for p in pairs):
            raise UsageError("give every input a text_pair, or none")
        results = self.predictor.predict(texts, pairs if pairs and pairs[0] is not None else None)
        out = []
        for result in results:
            ranked = sorted(({"label": k, "score": v} for k, v in result["scores"].items()), key=lambda d: -d["score"])
            out.append(ranked[0] if top_k == 1 else ranked[:top_k] if top_k else ranked)
        return out


class GreenadaptQuestionAnsweringPipeline(_GreenadaptPipeline):
    def __call__(self, *args: Any, question: Any = None, context: Any = None, **kwargs: Any) -> Any:
        if args:
            inputs = args[0]
        else:
            if question is None or context is None:
                raise UsageError("question-answering needs question= and context=")
            inputs = {"question": question, "context": context}
        items = inputs if isinstance(inputs, list) else [inputs]
        answers = self._predict(items, **self._with_defaults(kwargs))
        return answers if isinstance(inputs, list) else answers[0]

    def _predict(self, inputs: list[Any], top_k: int = 1, **unused: Any) -> list[Any]:
        _refuse(unused, "question-answering")
        if not inputs:
            return []
        pairs = [(item["question"], item["context"]) for item in inputs]
        results: list[Any] = []
        for answers in self.predictor.answer_many(pairs, n_best=top_k):
            shaped = [{"score": a["score"], "start": a["start"], "end": a["end"], "answer": a["text"]} for a in answers]
            if top_k == 1:
                results.append(shaped[0] if shaped else {"score": 0.0, "start": 0, "end": 0, "answer": ""})
            else:
                results.append(shaped)
        return results


PIPELINES = {
    "ner": GreenadaptTokenClassificationPipeline,
    "classify": GreenadaptTextClassificationPipeline,
    "qa": GreenadaptQuestionAnsweringPipeline,
}


def open_pipeline(task: str, model: Any, **options: Any) -> Pipeline:
    """``greenadapt.pipeline``: the pipeline of ``task`` over a fine-tuned folder (or a list of them: an ensemble).

    ``options``: :class:`~greenadapt.inference.qa.settings.LoadOptions`' fields (``greenadapt.load``'s) open the model;
    the rest are call options of transformers' pipeline of the task, which every call then uses.
    """
    from greenadapt.options import declared_fields
    from greenadapt.inference.labelling import ensemble_members, find_model_folder
    from greenadapt.inference.predictor import open_ensemble
    from greenadapt.inference.qa.settings import LoadOptions

    if task not in TASK_ALIASES:
        raise UsageError(f"unknown pipeline task {task!r}", hint=f"choose from {', '.join(HF_TASK.values())}")
    wanted = TASK_ALIASES[task]
    founds = [find_model_folder(member) for member in ensemble_members(model)]
    settings = founds[0][1]
    if settings.task != wanted:  # refused before any weights are loaded
        raise UsageError(
            f"{model} is a {settings.task} model, not {HF_TASK[wanted]}",
            hint=f"use greenadapt.pipeline({HF_TASK[settings.task]!r}, model=...)",
        )
    load_names = {field.name for field, _ in declared_fields(LoadOptions)}
    load_options = {k: v for k, v in options.items() if k in load_names}
    call_defaults = {k: v for k, v in options.items() if k not in load_names}
    opened = open_ensemble(founds, options=LoadOptions(**load_options))
    return PIPELINES[wanted](opened, call_defaults, task=HF_TASK[wanted])


def _hf_entity(entity: Any) -> dict[str, Any]:
    return {"entity_group": entity.label, "score": entity.score, "word": entity.text, "start": entity.start, "end": entity.end}


def _refuse(unused: dict[str, Any], task: str) -> None:
    if unused:
        raise UsageError(f"the greenadapt {task} pipeline does not take {', '.join(sorted(unused))}",
                         hint="greenadapt.load(...)'s options (device, pool, batch_size, precision, max_length) go to greenadapt.pipeline "
                              "too")


class TransformersEntry:
    """What ``transformers.pipeline(task, model=<folder>, trust_remote_code=True)`` makes of a two-tokenizer folder.

    The folder's ``greenadapt_pipeline.py`` (:mod:`greenadapt.artifacts.pipeline_entry`) names this class in
    config.json's ``custom_pipelines``, so transformers hands it the model it loaded; greenadapt opens the
    folder again (its checksums checked, both tokenizers read) and returns ``greenadapt.pipeline``'s object for it,
    whose predictions are the mean-pooled ones greenadapt reports. ``__new__`` returns that object because
    transformers calls this class to make the pipeline and keeps whatever the call returns.
    """

    # transformers reads these before it calls the class: greenadapt loads its own tokenizers.
    _load_tokenizer = False
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def __new__(cls, model: Any, task: str = "", device: Any = None, dtype: Any = None, **options: Any) -> Any:
        # transformers passes these only when its caller gave them: greenadapt would not use them, so it says so.
        given = sorted(set(options) & {"tokenizer", "feature_extractor", "image_processor", "video_processor", "processor"})
        if given:
            raise UsageError(f"{', '.join(given)}: greenadapt's pipeline reads both of the folder's tokenizers itself",
                             hint="leave it out, or pass pipeline_class= for transformers' own pipeline of one view")
        folder = getattr(model, "name_or_path", None) or str(model)
        del model  # greenadapt reopens the folder: its weights' checksums are checked before they are used
        return open_pipeline(task, folder, device=_device_spec(device), precision=_precision_of(dtype), **options)


def _device_spec(device: Any) -> str:
    """transformers' ``device`` (None, -1, a GPU index, a string or a ``torch.device``) as greenadapt's ``--device``."""
    if device is None:
        return "auto"
    if isinstance(device, int):
        return "cpu" if device < 0 else f"cuda:{device}"
    return str(device)


def _precision_of(dtype: Any) -> str:
    """transformers' ``dtype`` (None, "auto" or a torch dtype) as greenadapt's ``--precision``."""
    from greenadapt.compute.distributed import PRECISION_OF_DTYPE

    name = "auto" if dtype is None else str(dtype).removeprefix("torch.")
    if name == "auto":
        return "auto"
    if name not in PRECISION_OF_DTYPE:
        raise UsageError(f"dtype={dtype!r}: greenadapt runs inference in float32, bfloat16 or float16",
                         hint="leave dtype out (auto), or pass torch.float32, torch.bfloat16 or torch.float16")
    return PRECISION_OF_DTYPE[name]

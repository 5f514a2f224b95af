"""A spaCy pipeline component: ``doc.ents`` from a fine-tuned greenadapt NER folder, both views and their pooling.

    import spacy
    nlp = spacy.blank("en")                     # or a scispaCy pipeline
    nlp.add_pipe("greenadapt_ner", config={"model": "runs/ncbi"})
    [(e.text, e.label_) for e in nlp("Familial adenomatous polyposis is ...").ents]

spaCy finds the factory through the ``spacy_factories`` entry point that greenadapt's package declares, so no import
is needed (``pip install 'greenadapt[spacy]'``). The entities are greenadapt's own (``greenadapt predict``'s, from
the same :func:`greenadapt.load` model: same pooling, runtime and batch settings); spaCy's tokens only place them:
each entity becomes the span of the spaCy tokens its characters touch (``alignment_mode="expand"``), so where spaCy
splits a word differently from greenadapt the span widens to whole spaCy tokens, never narrows. Overlaps that the
widening creates keep the longer span (spaCy's ``filter_spans``). Like spaCy's own ``ner``, the component sets
``doc.ents``: entities an earlier component set are replaced.
"""

# (no `from __future__ import annotations`: spaCy validates the factory's config against its real annotations)
import inspect
import logging
import typing
from collections.abc import Iterable, Iterator
from typing import Any

try:
    from spacy.language import Language
    from spacy.tokens import Doc, Span
    from spacy.util import filter_spans, minibatch
except ModuleNotFoundError as missing:  # one line that names the extra, not a traceback from spaCy's absence
    raise ModuleNotFoundError("greenadapt's spaCy component needs spaCy: pip install 'greenadapt[spacy]'",
                              name=missing.name) from None

from greenadapt.api.build import keyword_parameters
from greenadapt.inference.settings import LoadSettings, TaskChoiceSettings

log = logging.getLogger(__name__)

FACTORY = "greenadapt_ner"
# The component's config is greenadapt.load's way of running a model, each key declared once (LoadSettings: runtime,
# quantize, pool, batch_size, device, precision, threads, general_model), with the command line's defaults, and the
# task of a multitask run (TaskChoiceSettings).
LOAD_PARAMETERS = [parameter.replace(annotation=typing.get_type_hints(group)[parameter.name])
                   for group in (LoadSettings, TaskChoiceSettings) for parameter in keyword_parameters(group)]
DEFAULT_CONFIG: dict[str, Any] = {"model": None, **{parameter.name: parameter.default for parameter in LOAD_PARAMETERS}}


class GreenadaptNer:
    """The component: greenadapt's NER model over each doc's text; ``pipe`` hands it ``batch_size`` docs at a time."""

    def __init__(self, nlp: Language, name: str, *, model: str | None, **settings: Any) -> None:
        from greenadapt.api.using import load
        from greenadapt.errors import UsageError
        from greenadapt.inference.predictor import NerModel

        if not model:
            raise UsageError(f'{FACTORY} needs its model: nlp.add_pipe("{FACTORY}", config={{"model": "RUN_FOLDER"}})')
        loaded = load(model, **settings)
        if not isinstance(loaded, NerModel):
            raise UsageError(f"{model} is not an NER run (its task finds no entities)",
                             hint=f"{FACTORY} takes a finetune --task ner folder, or a multitask run and an NER task")
        self.name, self.model = name, loaded
        self.batch_size = loaded.options.batch_size  # the model holds its settings as load made them

    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc])))

    def pipe(self, stream: Iterable[Doc], *, batch_size: int | None = None) -> Iterator[Doc]:
        for batch in minibatch(stream, size=batch_size or self.batch_size):
            docs = list(batch)
            for doc, entities in zip(docs, self.model.predict([doc.text for doc in docs]), strict=True):
                doc.ents = entity_spans(doc, entities)
                yield doc


def entity_spans(doc: Doc, entities: Iterable[Any]) -> list[Span]:
    """greenadapt's entities (character offsets) as spans of ``doc``'s tokens, widened to whole tokens."""
    spans = []
    for entity in entities:
        span = doc.char_span(entity.start, entity.end, label=entity.label, alignment_mode="expand")
        if span is None or not len(span):  # (only whitespace: no token to hold it)
            log.debug("%s: no spaCy token under %r (%d-%d)", FACTORY, entity.text, entity.start, entity.end)
            continue
        spans.append(span)
    return filter_spans(spans)


def make_greenadapt_ner(nlp: Language, name: str, model: str | None, **settings: Any) -> GreenadaptNer:
    return GreenadaptNer(nlp, name, model=model, **settings)


# spaCy reads a factory's config keys, types and defaults from its signature: LoadSettings' fields, as greenadapt.load's.
make_greenadapt_ner.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*list(inspect.signature(make_greenadapt_ner).parameters.values())[:3], *LOAD_PARAMETERS],
    return_annotation=GreenadaptNer)
Language.factory(FACTORY, default_config=DEFAULT_CONFIG)(make_greenadapt_ner)

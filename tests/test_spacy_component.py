"""The spaCy component (issue 95): ``nlp.add_pipe("greenadapt_ner", config={"model": RUN})`` gives ``doc.ents`` that are
greenadapt predict's entities on the same text, placed on spaCy's own tokens; ``nlp.pipe`` batches; ONNX is selectable;
without spaCy the module says which extra to install, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded, write_ner_file

# Sentences of the NCBI-disease kind (abstract sentences naming diseases), written out so the test needs no data set,
# with the disease words the tiny model was trained on; spaCy and greenadapt's pre-tokenizer split some of them
# differently (hyphens, slashes, parentheses, apostrophes), which is what the mapping must survive.
SENTENCES = [
    "Germline mutations are responsible for most cases of inherited melanoma and glioma in these families.",
    "Patients with T-cell leukemia (ALL) and sepsis-associated tachycardia were studied in 1998.",
    "The tumor-suppressor protein controls glioma growth; its loss causes cancer/infection in mice.",
    "Sepsis, leukemia and melanoma: three patients' tumors were sequenced.",
    "Recurrent infection was the first sign of the sepsis-like tumor syndrome.",
    "No tachycardia was seen with insulin or kinase inhibitors in the study of cells.",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-view NER run that tags plenty (a few steps at a high rate: the mapping needs entities, not accuracy)."""
    import greenadapt

    root = tmp_path_factory.mktemp("spacy")
    model = build_tiny_expanded(root / "model")
    greenadapt.finetune("ner", write_ner_file(root / "train.tsv", 32, seed=1), model=str(model), out=root / "run", max_steps=40,
                        lr=5e-3, batch_size=8, seed=1, device="cpu", entity_type="Disease", progress=False)
    return root / "run"


def _expected(run: Path, nlp: object, texts: list[str], **load: object) -> list[list[tuple[int, int, str]]]:
    """greenadapt's entities for each text, widened to the spaCy tokens they touch (as the component promises)."""
    import greenadapt
    from spacy.util import filter_spans

    found = []
    for text, entities in zip(texts, greenadapt.load(run, **load).predict(texts), strict=True):
        doc = nlp.make_doc(text)  # type: ignore[attr-defined]
        spans = [doc.char_span(e.start, e.end, label=e.label, alignment_mode="expand") for e in entities]
        found.append([(s.start_char, s.end_char, s.label_) for s in filter_spans([s for s in spans if s is not None and len(s)])])
    return found


def test_doc_ents_are_greenadapt_predicts_entities_on_spacys_tokens(run: Path) -> None:
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("greenadapt_ner", config={"model": str(run)})  # found through the entry point: no import of ours
    got = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in (nlp(text) for text in SENTENCES)]
    assert got == _expected(run, nlp, SENTENCES)
    assert sum(map(len, got)) >= 3  # the test has entities to place
    import greenadapt

    exact = [(e.start, e.end) for text, es in zip(SENTENCES, greenadapt.load(run).predict(SENTENCES), strict=True) for e in es]
    placed = {(e[0], e[1]) for doc in got for e in doc}
    # where greenadapt's words are spaCy's tokens, the span is the same characters (most of them here)
    assert len(placed & set(exact)) >= len(exact) // 2


def test_nlp_pipe_batches_and_gives_the_same_docs(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    component = nlp.add_pipe("greenadapt_ner", config={"model": str(run)})
    one_by_one = [[(e.start_char, e.end_char, e.label_) for e in nlp(text).ents] for text in SENTENCES]
    calls: list[int] = []
    real = component.model.predict
    monkeypatch.setattr(component.model, "predict", lambda texts: (calls.append(len(texts)), real(texts))[1])
    piped = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(SENTENCES, batch_size=4)]
    assert piped == one_by_one and calls == [4, 2]


def test_the_onnx_runtime_is_selectable(run: Path) -> None:
    spacy = pytest.importorskip("spacy")
    pytest.importorskip("onnxruntime")
    nlp = spacy.blank("en")
    nlp.add_pipe("greenadapt_ner", config={"model": str(run), "runtime": "onnx"})
    got = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(SENTENCES)]
    assert got == _expected(run, nlp, SENTENCES, runtime="onnx")


def test_a_missing_model_or_a_non_ner_run_is_one_line(tmp_path: Path) -> None:
    spacy = pytest.importorskip("spacy")
    from greenadapt.errors import GreenAdaptError

    with pytest.raises(GreenAdaptError, match="needs its model"):
        spacy.blank("en").add_pipe("greenadapt_ner")


def test_without_spacy_the_module_names_the_extra_in_one_line() -> None:
    code = ("import sys; sys.modules['spacy'] = None\n"
            "try:\n    import greenadapt.api.spacy_component\n"
            "except ModuleNotFoundError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "greenadapt's spaCy component needs spaCy: pip install 'greenadapt[spacy]'", done.stderr


def test_an_entity_inside_a_spacy_token_widens_to_it_and_overlaps_keep_the_longer() -> None:
    spacy = pytest.importorskip("spacy")
    from greenadapt.inference.predictor import Entity
    from greenadapt.api.spacy_component import entity_spans

    doc = spacy.blank("en").make_doc("no tachycardias or sepsis here")
    inside = [Entity(3, 14, "tachycardia", "Disease", 0.9), Entity(8, 15, "cardias", "Disease", 0.8),  # one token, twice
              Entity(19, 25, "sepsis", "Disease", 0.7), Entity(25, 26, " ", "Disease", 0.5)]  # a space: no token
    assert [(s.text, s.label_) for s in entity_spans(doc, inside)] == [("tachycardias", "Disease"), ("sepsis", "Disease")]


def test_the_components_config_is_loads_options_with_their_defaults(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every greenadapt.load option (LoadSettings: threads and general_model too) is a config key of the component with
    load's default, declared once, so a new one reaches spaCy by itself; spaCy refuses a key or a value load would not
    take before any model is opened."""
    import spacy

    from greenadapt.api import using
    from greenadapt.inference.settings import LoadSettings, TaskChoiceSettings
    from greenadapt.options import declared_fields

    received: dict[str, object] = {}
    real = using.load

    def spy(path: object, **keywords: object) -> object:
        received.update(keywords)
        return real(path, **keywords)  # type: ignore[arg-type]

    monkeypatch.setattr(using, "load", spy)
    component = spacy.blank("en").add_pipe("greenadapt_ner", config={"model": str(run), "threads": 1, "batch_size": 2})
    assert component.batch_size == 2  # what pipe() hands the model at a time when spaCy's own call gives none
    declared = [*declared_fields(LoadSettings), *declared_fields(TaskChoiceSettings)]  # (task: a multitask run's)
    assert received == {**{field.name: field.default for field, _ in declared}, "threads": 1, "batch_size": 2}
    for config, named in (({"batch_size": "many"}, "batch_size"), ({"colour": "red"}, "colour")):
        received.clear()
        with pytest.raises(Exception, match=named):
            spacy.blank("en").add_pipe("greenadapt_ner", config={"model": str(run), **config})
        assert not received

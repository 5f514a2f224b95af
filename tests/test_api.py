"""The Python API: ``greenadapt.load(...).predict``, ``greenadapt.pipeline`` and the shared defaults.

The invariant throughout: the API gives exactly what ``greenadapt predict``
(and so ``finetune``'s reported scores) gives on the same words.
"""

from __future__ import annotations

import json
import shutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file
from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

import greenadapt
from greenadapt.inference.settings import LoadSettings
from greenadapt.corpus.words import split_sentences, split_words
from greenadapt.data.metrics import chunks
from greenadapt.errors import StageError, UsageError
from greenadapt.inference.labelling import run_predict


@pytest.fixture(scope="module")
def ner_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("api-ner")
    return {
        "train": write_ner_file(root / "train.tsv", 40, seed=1, typed=True),
        "test": write_ner_file(root / "test.tsv", 15, seed=3, typed=True),
    }


@pytest.fixture(scope="module")
def ner_run(ner_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = build_tiny_expanded(tmp_path_factory.mktemp("api-expanded") / "model")
    # The block `greenadapt expand` writes into config.json; fine-tuning must carry it on.
    config = json.loads((model / "config.json").read_text())
    config["greenadapt"] = {"method": "lstsq", "general_tokenizer": "general-tokenizer", "pooling": "mean"}
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path_factory.mktemp("api-runs") / "ner"
    greenadapt.finetune(
        "ner", ner_data["train"], test=ner_data["test"], model=str(model), out=out,
        epochs=4, batch_size=8, lr=3e-3, device="cpu", seed=7,
    )
    return out


def _sentences(path: Path) -> list[list[str]]:
    sentences, words = [], []
    for line in path.read_text().splitlines():
        if line.strip():
            words.append(line.split("\t")[0])
        elif words:
            sentences.append(words)
            words = []
    return sentences + ([words] if words else [])


def _predicted_tags(path: Path) -> list[list[str]]:
    out, tags = [], []
    for line in path.read_text().splitlines():
        if line.strip():
            tags.append(line.split("\t")[-1])
        elif tags:
            out.append(tags)
            tags = []
    return out + ([tags] if tags else [])


@pytest.fixture(scope="module")
def cli_tags(ner_run: Path, ner_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    out = tmp_path_factory.mktemp("api-pred") / "pred.tsv"
    run_predict(ner_run, ner_data["test"], out, ignore_labels=True, options=LoadSettings(device="cpu"))
    return _predicted_tags(out)


# --------------------------------------------------------------------------
# The package and its defaults


def test_importing_greenadapt_loads_no_heavy_library() -> None:
    code = ("import sys, greenadapt, greenadapt.api; greenadapt.load; print(sorted(m for m in ('torch', 'transformers', 'gensim') if m in "
            "sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    from greenadapt import api

    for name in ("load", "pipeline"):
        assert getattr(greenadapt, name) is getattr(api, name)


def test_the_api_functions_stay_functions_after_every_module_is_imported(tmp_path: Path) -> None:
    # A submodule bound on the package under an API function's name would hide the function.
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(greenadapt.__path__, "greenadapt."):
        if not module.name.endswith("__main__"):  # that one runs the CLI
            importlib.import_module(module.name)
    for name in greenadapt.__all__:
        assert callable(getattr(greenadapt, name)) and not isinstance(getattr(greenadapt, name), type(greenadapt)), name

    with pytest.raises(UsageError, match="^epochs must be at least 1, not 0$"):
        greenadapt.adapt("sample", epochs=0, workdir=tmp_path)

    with pytest.raises(UsageError, match="^unknown task .summarize."):
        greenadapt.finetune("summarize", tmp_path / "train.tsv")
    with pytest.raises(UsageError, match="^batch_size must be at least 1"):
        greenadapt.qa(tmp_path / "data.json", tmp_path / "out", batch_size=0)
    with pytest.raises(AttributeError):
        greenadapt.no_such_function  # noqa: B018


# Every option's default is checked against the CLI and the library configs in tests/test_defaults.py.


def test_the_stage_functions_one_by_one_name_and_reuse_what_adapt_writes(tiny_bert: Path, tmp_path: Path) -> None:
    """`greenadapt.w2v`, `align` and `expand` with their defaults are `adapt`'s three stages: adapt afterwards redoes nothing."""
    import random

    rng = random.Random(0)
    words = ["the", "patients", "with", "tachycardia", "and", "leukemia", "were", "in", "study", "of", "cells", "insulin", "kinase"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(300)) + "\n")
    work = tmp_path / "work"
    common = {"model": str(tiny_bert), "workdir": work}
    vectors = greenadapt.w2v(str(corpus), min_count=1, workers=1, **common)
    aligned = greenadapt.align(corpus=str(corpus), **common)
    expanded = greenadapt.expand(corpus=str(corpus), **common)
    assert not vectors.skipped and not aligned.skipped and not expanded.skipped
    assert aligned.path.parent == vectors.path.parent == expanded.path.parent  # the workspace found each stage's input

    adapted = greenadapt.adapt(str(corpus), min_count=1, workers=1, **common)
    assert adapted.w2v.skipped and adapted.align.skipped and adapted.expand.skipped
    assert adapted.expand.path == expanded.path


# --------------------------------------------------------------------------
# Words and sentences of raw text


def test_sentences_cut_at_sentence_ends_but_not_abbreviations_or_initials() -> None:
    text = "Mutations in BRCA1 (e.g. 185delAG) cause cancer. Smith et al. found it!  J. Doe agreed.\nA new line"
    pieces = [text[a:b] for a, b in split_sentences(text)]
    assert pieces == ["Mutations in BRCA1 (e.g. 185delAG) cause cancer.", "Smith et al. found it!", "J. Doe agreed.", "A new line"]
    assert split_sentences("   \n\n ") == []
    fever = "Fever was 39.5 degrees (Fig. 2). It fell."
    assert [fever[a:b] for a, b in split_sentences(fever)] == ["Fever was 39.5 degrees (Fig. 2).", "It fell."]


def test_words_keep_offsets_and_split_punctuation_like_bert() -> None:
    text = "x-ray, BRCA1's  end"
    words = split_words(text)
    assert [text[a:b] for a, b in zip(words.starts, words.ends, strict=True)] == ["x", "-", "ray", ",", "BRCA1", "'", "s", "end"]


# --------------------------------------------------------------------------
# NER


def test_ner_predict_on_raw_text_equals_predict_on_the_words(ner_run: Path, ner_data: dict[str, Path], cli_tags: list[list[str]]) -> None:
    model = greenadapt.load(ner_run, device="cpu")
    assert model.task == "ner" and model.mode == "mean" and model.labels[0] == "O"
    sentences = _sentences(ner_data["test"])
    # One document per sentence; words joined by spaces (the synthetic words hold no punctuation).
    documents = [" ".join(words) for words in sentences]
    predicted = model.predict(documents)
    assert len(predicted) == len(documents)
    found = 0
    for text, words, entities, tags in zip(documents, sentences, predicted, cli_tags, strict=True):
        starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
        expected = [(int(starts[a]), int(starts[b]) + len(words[b]), kind) for a, b, kind in chunks(tags)]
        assert [(e.start, e.end, e.label) for e in entities] == expected
        for entity in entities:
            assert text[entity.start : entity.end] == entity.text and 0.0 < entity.score <= 1.0
        found += len(entities)
    assert found > 0  # the model learnt something to compare
    # Pre-split words give the same tags as `greenadapt predict`.
    tags, scores = model.tag_words(sentences)
    assert tags == cli_tags and all(len(s) == len(w) for s, w in zip(scores, sentences, strict=True))


def test_raw_text_words_are_the_model_pre_tokenizers(ner_run: Path) -> None:
    """Raw text is split into words as the model's tokenizer pre-tokenizes: each punctuation mark alone, offsets kept."""
    from greenadapt.inference.predictor import _raw_sentences

    model = greenadapt.load(ner_run, device="cpu")
    text = "BRCA1-associated ((tachycardia)), e.g. here.  Next one."
    pre = model.opened.tokenizers.general.backend_tokenizer.pre_tokenizer
    sentences = _raw_sentences([text], pre)
    assert [s.sentence.words for s in sentences] == [
        ("BRCA1", "-", "associated", "(", "(", "tachycardia", ")", ")", ",", "e", ".", "g", ".", "here", "."), ("Next", "one", "."),
    ]
    assert all(text[a:b] == w for s in sentences for a, b, w in zip(s.starts, s.ends, s.sentence.words, strict=True))


def test_ner_predict_keeps_offsets_across_sentences_and_documents(ner_run: Path) -> None:
    model = greenadapt.load(ner_run, device="cpu")
    text = "The leukemia of patients was high. Patients with melanoma and sepsis were studied.\nThe glioma study."
    entities = model.predict(text)
    assert all(text[e.start : e.end] == e.text for e in entities)
    assert [e.start for e in entities] == sorted(e.start for e in entities)
    alone = model.predict(["The glioma study."])[0]
    assert [(e.text, e.label) for e in alone] == [(e.text, e.label) for e in entities if e.start >= text.index("The glioma")]
    assert model.predict("") == [] and model.predict([]) == []
    with pytest.raises(UsageError):
        model.predict([None])  # type: ignore[list-item]


def test_token_classification_pipeline_is_a_transformers_pipeline_with_the_same_entities(ner_run: Path) -> None:
    from transformers import Pipeline

    pipe = greenadapt.pipeline("token-classification", model=ner_run, device="cpu")
    assert isinstance(pipe, Pipeline)
    texts = ["Patients with melanoma and sepsis were studied.", "The leukemia of patients was high."]
    expected = greenadapt.load(ner_run, device="cpu").predict(texts)
    batched = pipe(texts)
    assert batched == [
        [{"entity_group": e.label, "score": e.score, "word": e.text, "start": e.start, "end": e.end} for e in entities]
        for entities in expected
    ]
    assert pipe(texts[0]) == batched[0]  # one input runs through preprocess -> _forward -> postprocess
    words = [t.rstrip(".").split() for t in texts]
    split = pipe(words, is_split_into_words=True)
    assert [[d["word"] for d in doc] for doc in split] == [[d["word"] for d in doc] for doc in batched]
    with pytest.raises(UsageError, match="ner model"):
        greenadapt.pipeline("text-classification", model=ner_run)
    with pytest.raises(UsageError, match="unknown pipeline task"):
        greenadapt.pipeline("summarization", model=ner_run)


def test_transformers_pipeline_on_a_two_tokenizer_folder_loads_both_views_or_refuses(
    ner_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 65, point 8: transformers' own pipeline read the domain tokenizer alone, in silence."""
    import transformers
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))  # where transformers copies the folder's code
    texts = ["Patients with melanoma and sepsis were studied.", "The leukemia of patients was high."]
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        transformers.pipeline("token-classification", model=str(ner_run))
    both = transformers.pipeline("token-classification", model=str(ner_run), trust_remote_code=True, device="cpu")
    assert isinstance(both, transformers.Pipeline)
    assert both(texts) == greenadapt.pipeline("token-classification", model=ner_run, device="cpu")(texts)
    found = {e["entity_group"] for doc in both(texts) for e in doc}
    assert found and both(texts, ignore_labels=sorted(found)) == [[], []]  # transformers' call options reach it
    with pytest.raises(UsageError, match="both of the folder's tokenizers"):  # not dropped in silence
        transformers.pipeline("token-classification", model=str(ner_run), trust_remote_code=True, device="cpu", tokenizer=str(ner_run))
    one = transformers.pipeline("token-classification", model=str(ner_run), pipeline_class=transformers.TokenClassificationPipeline)
    assert type(one) is transformers.TokenClassificationPipeline  # one view, asked for by name


def test_transformers_device_and_dtype_become_greenadapts_options() -> None:
    import torch

    from greenadapt.inference.hf_pipeline import _device_spec, _precision_of

    assert [_device_spec(d) for d in (None, -1, 0, 1, "cpu", torch.device("cuda",
                                                                          2))] == ["auto", "cpu", "cuda:0", "cuda:1", "cpu", "cuda:2"]
    assert [_precision_of(t) for t in (None, "auto", torch.float32, torch.bfloat16,
                                       torch.float16)] == ["auto", "auto", "fp32", "bf16", "fp16"]
    with pytest.raises(UsageError, match="float32, bfloat16 or float16"):
        _precision_of(torch.int8)


def test_a_one_tokenizer_folder_stays_transformers_own(ner_data: dict[str, Path], tmp_path: Path) -> None:
    import transformers
    from conftest import build_tiny_bert

    from greenadapt.artifacts.pipeline_entry import CUSTOM_PIPELINES, ENTRY_FILE, write_pipeline_entry

    run = tmp_path / "run"
    greenadapt.finetune("ner", ner_data["train"], model=str(build_tiny_bert(tmp_path / "bert")), out=run, epochs=1,
                        batch_size=8, device="cpu")
    assert not (run / ENTRY_FILE).exists() and CUSTOM_PIPELINES not in json.loads((run / "config.json").read_text())
    assert type(transformers.pipeline("token-classification", model=str(run))) is transformers.TokenClassificationPipeline
    # A one-tokenizer model trained from a two-tokenizer folder does not inherit its entry.
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, CUSTOM_PIPELINES: {"token-classification": {"impl": "x.Y"}}}))
    write_pipeline_entry(run, pipeline_tag="token-classification", auto_model="AutoModelForTokenClassification", two_tokenizers=False)
    assert json.loads((run / "config.json").read_text()) == config


def test_the_pipeline_takes_transformers_usual_keywords_and_refuses_the_rest_in_one_line(ner_run: Path) -> None:
    """`greenadapt.pipeline(..., aggregation_strategy="simple")` was a TypeError (issue 37)."""
    texts = ["Patients with melanoma and sepsis were studied.", "The leukemia of patients was high."]
    plain = greenadapt.pipeline("token-classification", model=ner_run, device="cpu")(texts)
    simple = greenadapt.pipeline("token-classification", model=ner_run, device="cpu", aggregation_strategy="simple")
    assert simple(texts) == plain and simple(texts[0]) == plain[0]
    labels = {e["entity_group"] for doc in plain for e in doc}
    assert labels  # something to leave out
    kept = greenadapt.pipeline("ner", model=ner_run, device="cpu", ignore_labels=sorted(labels))(texts)
    assert kept == [[], []]
    with pytest.raises(UsageError, match="whole entities only"):
        greenadapt.pipeline("token-classification", model=ner_run, device="cpu", aggregation_strategy="none")
    with pytest.raises(UsageError, match="does not take no_such_option"):
        greenadapt.pipeline("token-classification", model=ner_run, device="cpu", no_such_option=1)


def test_results_print_short_and_progress_is_there_when_asked(
    ner_data: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`print(greenadapt.adapt(...))` dumped kilobytes of manifests, and the API showed no progress (issue 37)."""
    model = build_tiny_expanded(tmp_path / "model")
    run = greenadapt.finetune("ner", ner_data["train"], model=str(model), out=tmp_path / "run", epochs=1, batch_size=8,
                              device="cpu", progress=True)
    shown = capsys.readouterr()
    assert shown.out == ""  # progress is a log: stderr only
    assert any(line.split(" ", 1)[-1].startswith("fine-tuning") for line in shown.err.splitlines()), shown.err
    assert repr(run) == f"<finetune done at {str(run.path)!r}>" and len(json.dumps(run.manifest)) > 1000
    again = greenadapt.finetune("ner", ner_data["train"], model=str(model), out=tmp_path / "run", epochs=1, batch_size=8, device="cpu")
    assert repr(again).startswith("<finetune skipped")
    # No progress unless asked (other lines may reach stderr: a log handler another test left behind).
    assert not [line for line in capsys.readouterr().err.splitlines() if re.match(r"\d\d:\d\d:\d\d fine-tuning", line)]

    from greenadapt.adaptation.pipeline import AdaptOutcome

    adapted = AdaptOutcome(again, again, again)
    assert repr(adapted).startswith(f"<adapted model at {str(again.path)!r} (w2v skipped") and adapted.path == again.path


def test_load_refuses_a_question_answering_option_for_a_labelling_model(ner_run: Path, tmp_path: Path) -> None:
    from greenadapt.errors import UsageError

    twin = tmp_path / "twin"
    shutil.copytree(ner_run, twin)  # an ensemble of two folders
    for keyword in ({"max_length": 64}, {"max_answer_chars": 30}):
        with pytest.raises(UsageError, match=f"{next(iter(keyword))} is for question-answering models, not ner models"):
            greenadapt.load(ner_run, device="cpu", **keyword)
        with pytest.raises(UsageError, match="for question-answering models, not an ensemble"):
            greenadapt.load([ner_run, twin], device="cpu", **keyword)
    assert greenadapt.load(ner_run, device="cpu", max_answer_chars=500) is not None  # at its default: not set


def test_load_refuses_what_is_not_a_finetuned_model(tmp_path: Path) -> None:
    with pytest.raises(StageError):
        greenadapt.load(tmp_path)
    with pytest.raises(StageError):
        greenadapt.load(tmp_path / "missing")


# --------------------------------------------------------------------------
# Classification and QA


def test_classifier_predict_equals_predict_and_the_pipeline(tmp_path: Path) -> None:
    model_folder = build_tiny_expanded(tmp_path / "model")
    train = write_classify_file(tmp_path / "train.jsonl", 40, seed=1)
    test = write_classify_file(tmp_path / "test.jsonl", 12, seed=2)
    greenadapt.finetune("classify", train, model=str(model_folder), out=tmp_path / "run", epochs=3, batch_size=8, lr=3e-3, device="cpu")
    run_predict(tmp_path / "run", test, tmp_path / "pred.jsonl", options=LoadSettings(device="cpu"))
    expected = [json.loads(line)["pred_label"] for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    texts = [json.loads(line)["text"] for line in test.read_text().splitlines()]
    model = greenadapt.load(tmp_path / "run", device="cpu")
    predicted = model.predict(texts)
    assert [p["label"] for p in predicted] == expected
    for p in predicted:
        assert abs(sum(p["scores"].values()) - 1.0) < 1e-6 and p["score"] == max(p["scores"].values())
    pipe = greenadapt.pipeline("text-classification", model=tmp_path / "run", device="cpu")
    assert [d["label"] for d in pipe(texts)] == expected
    assert len(pipe(texts[0], top_k=None)) == 2
    onnx_pipe = greenadapt.pipeline("text-classification", model=tmp_path / "run", runtime="onnx")  # the CPU runtime too
    assert [d["label"] for d in onnx_pipe(texts)] == expected


def test_qa_answer_equals_greenadapt_qa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    import transformers.dynamic_module_utils as dynamic

    import greenadapt

    context = "Heart rate was high in myocarditis. Ventilation was the main treatment of covid patients."
    data = squad_file(
        tmp_path / "train.json",
        [{"paragraphs": [paragraph(context, ("q1", "What was high?", [("Heart rate", 0)]),
                                   ("q2", "What was the main treatment?", [("Ventilation", 36)]))]}],
    )
    trained = greenadapt.finetune(task="qa", train=data, model=str(build_tiny_expanded_qa(tmp_path / "model")), out=tmp_path / "ft",
                                  max_length=32, doc_stride=8, batch_size=4, lr=3e-3, max_steps=30, seed=3)
    answered = greenadapt.qa(data, model=str(trained.path), max_length=32, device="cpu", out=tmp_path / "qa")
    expected = json.loads((answered.path / "predictions.json").read_text())
    model = greenadapt.load(trained.path, device="cpu", max_length=32)  # the windows `greenadapt qa --max-length 32` used
    for qid, question in (("q1", "What was high?"), ("q2", "What was the main treatment?")):
        answer = model.answer(question, context)
        assert answer["text"] == expected[qid] == context[answer["start"] : answer["end"]]
    assert model.answer("Anything?", "") is None
    pipe = greenadapt.pipeline("question-answering", model=trained.path, device="cpu", max_length=32)
    assert pipe(question="What was high?", context=context)["answer"] == expected["q1"]
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    both = transformers.pipeline("question-answering", model=str(trained.path), trust_remote_code=True, device="cpu", max_length=32)
    assert both(question="What was high?", context=context) == pipe(question="What was high?", context=context)


# --------------------------------------------------------------------------
# `greenadapt predict` on raw text, JSON lines, folders and stdin


def _cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         stdin: str | None = None) -> tuple[int, str, str]:
    import io

    from greenadapt.cli import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, "--quiet"])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    ("task", "lines", "expected"),
    [
        ("ner", ["BRCA1\tB-Gene", "mutations\tO", "", "cause\tO"], "columns"),
        ("ner", ["BRCA1", "mutations", "", "cause"], "columns"),
        ("ner", ["BRCA1 mutations cause breast cancer.", "A second document."], "text"),
        ("ner", ["Fever."], "text"),
        ("ner", ['{"text": "BRCA1 mutations."}'], "jsonl"),
        ("ner", ['{"tokens": ["BRCA1"], "tags": ["B"]}'], "training-jsonl"),
        ("classify", ["a text\t1"], "tsv"),
        ("classify", ["a text without tabs"], "text"),
        ("classify", ['{"text": "x", "label": "1"}'], "training-jsonl"),
        ("ner", [], "text"),
        ("ner", ["BRCA1\tX-FOO", "mutations\tX-BAR", "", "cause\tO"], "columns"),  # labels the model never saw: still columns
        ("ner", ["Patients were studied.\tnote", "A second document here."], "text"),
    ],
)
def test_input_format_is_detected_from_the_first_lines(task: str, lines: list[str], expected: str) -> None:
    from greenadapt.inference.prediction_input import detect_format

    assert detect_format(task, [line + "\n" for line in lines]) == expected


def test_predict_rejects_a_column_file_with_unknown_labels_as_columns_do(
    ner_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36.6: each word<TAB>label line used to become a raw-text "document" (exit 0, 1,304 documents)."""
    source = tmp_path / "ner_with_X-FOO_labels.tsv"
    source.write_text("".join(f"word{i}\t{'X-FOO' if i % 3 == 0 else 'O'}\n" + ("\n" if i % 7 == 6 else "") for i in range(40)))
    auto = _cli(["predict", "-m", str(ner_run), str(source), "--device", "cpu"], monkeypatch, capsys)
    columns = _cli(["predict", "-m", str(ner_run), str(source), "--device", "cpu", "--format", "columns"], monkeypatch, capsys)
    assert auto[0] == columns[0] != 0, auto
    assert auto[1] == "" and len(auto[2].strip().splitlines()) == 1 and "X-FOO" in auto[2], auto[2]
    assert auto[2] == columns[2]


def test_predict_reads_stdin_text_and_writes_one_json_line_per_input_line(
    ner_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = ["Patients with melanoma and sepsis were studied. The leukemia of patients was high.", "", "The glioma study."]
    code, out, err = _cli(["predict", "-m", str(ner_run), "-", "--device", "cpu"], monkeypatch, capsys, stdin="\n".join(documents) + "\n")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["text"] for r in records] == documents and [r["line"] for r in records] == [1, 2, 3]
    expected = greenadapt.load(ner_run, device="cpu").predict(documents)
    assert [r["entities"] for r in records] == [[e.to_dict() for e in entities] for entities in expected]
    assert records[1]["entities"] == [] and sum(len(r["entities"]) for r in records) > 0


def test_predict_keeps_jsonl_fields_and_reads_folders(
    ner_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text(json.dumps({"id": 7, "text": "The leukemia of patients was high."}) + "\n")
    out = tmp_path / "spans.jsonl"
    code, stdout, err = _cli(["predict", "-m", str(ner_run), str(source), "-o", str(out), "--device", "cpu", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(stdout)["format"] == "jsonl"
    record = json.loads(out.read_text())
    assert record["id"] == 7 and all(record["text"][e["start"] : e["end"]] == e["text"] for e in record["entities"])

    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("The leukemia of patients was high.\nThe glioma study.")
    (folder / "sub" / "b.txt").write_text("Patients with melanoma.")
    code, stdout, err = _cli(["predict", "-m", str(ner_run), str(folder), "--device", "cpu"], monkeypatch, capsys)
    assert code == 0, err
    records = [json.loads(line) for line in stdout.splitlines()]
    assert [r["file"] for r in records] == ["a.txt", "sub/b.txt"]
    assert records[0]["text"].endswith("The glioma study.")


def test_predict_labels_a_column_file_from_stdin_like_the_file_itself(
    ner_run: Path, ner_data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file_out = tmp_path / "pred.tsv"
    code, _, err = _cli(["predict", "-m", str(ner_run), "--input", str(ner_data["test"]), "-o", str(file_out), "--device", "cpu"],
                        monkeypatch, capsys)
    assert code == 0, err
    code, stdout, err = _cli(["predict", "-m", str(ner_run), "-", "--device", "cpu"], monkeypatch, capsys,
                             stdin=ner_data["test"].read_text())
    assert code == 0, err
    assert stdout == file_out.read_text()
    assert "f1" in err  # the scores of a labelled input, on stderr beside the predictions on stdout


def test_predict_refuses_bad_invocations_in_one_line(
    ner_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("The glioma study.\n")
    for args, needle in [
        (["predict", "-m", str(ner_run), str(text), "--json"], "--json"),
        (["predict", "-m", str(ner_run)], "no input: give a file or folder as INPUT, or - to read standard input"),
        (["predict", "-m", str(ner_run), str(text), "--input", str(text)], "give the input once"),
        (["predict", "-m", str(ner_run), str(tmp_path / "missing.txt")], "input not found"),
        (["predict", "-m", str(ner_run), str(text), "--format", "xml"], "unknown --format"),
        (["predict", "-m", str(ner_run), str(text), "-o", str(text), "--force"], "input"),
    ]:
        code, out, err = _cli(args, monkeypatch, capsys)
        assert code != 0 and out == "" and needle in err and len(err.strip().splitlines()) == 1, (args, err)
    assert text.read_text() == "The glioma study.\n"


def test_predict_classifies_raw_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model_folder = build_tiny_expanded(tmp_path / "model")
    train = write_classify_file(tmp_path / "train.jsonl", 30, seed=1)
    greenadapt.finetune("classify", train, model=str(model_folder), out=tmp_path / "run", epochs=2, batch_size=8, lr=3e-3, device="cpu")
    texts = ["patients with melanoma", "the study of cells"]
    code, out, err = _cli(["predict", "-m", str(tmp_path / "run"), "-", "--device", "cpu"], monkeypatch, capsys,
                          stdin="\n".join(texts) + "\n")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    expected = greenadapt.load(tmp_path / "run", device="cpu").predict(texts)
    assert [(r["label"], r["scores"]) for r in records] == [(e["label"], e["scores"]) for e in expected]


# --------------------------------------------------------------------------
# The real thing: MiniLM adapted on the bundled sample corpus, NCBI-disease


@pytest.mark.integration
def test_pipeline_f1_on_ncbi_disease_equals_finetunes_reported_mean_pooled_f1(minilm_path: Path, shared_data: Path, tmp_path: Path) -> None:
    """`greenadapt.pipeline` over the whole NCBI-disease test set scores exactly what `finetune` reported (mean pooling)."""
    from greenadapt.data.metrics import entity_scores

    ncbi = shared_data / "ner" / "NCBI-disease"
    train = tmp_path / "train.tsv"
    train.write_text("\n\n".join(ncbi.joinpath("train.tsv").read_text(encoding="utf-8").split("\n\n")[:300]) + "\n", encoding="utf-8")
    adapted = greenadapt.adapt("sample", model=str(minilm_path), workdir=tmp_path / "work", epochs=1, workers=2)
    run = greenadapt.finetune(
        "ner", train, test=ncbi / "test.tsv", model=str(adapted.expand.path), out=tmp_path / "run",
        max_steps=120, batch_size=16, lr=3e-4, device="cpu", entity_type="Disease",
    )
    pools = json.loads((run.path / "metrics.json").read_text())["per_seed"]["42"]["test"]
    reported = pools["mean"]
    # A model that found entities, and whose pooled predictions differ from one tokenizer's: the comparison can fail.
    assert reported["gold_entities"] > 900 and reported["f1"] > 0.2
    assert reported["predicted_entities"] != pools["general"]["predicted_entities"]

    sentences, gold = [], []
    for block in ncbi.joinpath("test.tsv").read_text(encoding="utf-8").split("\n\n"):
        rows = [line.split("\t") for line in block.splitlines() if line.strip()]
        if rows:
            sentences.append([r[0] for r in rows])
            gold.append([r[-1] if r[-1] == "O" else f"{r[-1]}-Disease" for r in rows])
    pipe = greenadapt.pipeline("token-classification", model=run.path, device="cpu")
    predicted = []
    for words, entities in zip(sentences, pipe(sentences, is_split_into_words=True), strict=True):
        starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]]).tolist()
        tags = ["O"] * len(words)
        for entity in entities:
            first, last = starts.index(entity["start"]), starts.index(entity["end"] - len(entity["word"].split(" ")[-1]))
            tags[first : last + 1] = [f"B-{entity['entity_group']}"] + [f"I-{entity['entity_group']}"] * (last - first)
        predicted.append(tags)
    scores = entity_scores(gold, predicted)
    assert scores["f1"] == reported["f1"] and scores["predicted_entities"] == reported["predicted_entities"]


def test_the_readmes_plain_transformers_recipe_gives_the_pooled_tags(ner_run: Path, ner_data: dict[str, Path],
                                                                     cli_tags: list[list[str]]) -> None:
    """The README's code for users without greenadapt: both tokenizers, first wordpiece, mean of the logits."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    path = str(ner_run)
    model = AutoModelForTokenClassification.from_pretrained(path).eval()
    tokenizers = [AutoTokenizer.from_pretrained(path),
                  AutoTokenizer.from_pretrained(f"{path}/{model.config.greenadapt['general_tokenizer']}")]
    for words, expected in zip(_sentences(ner_data["test"]), cli_tags, strict=True):
        logits = []
        for tok in tokenizers:
            enc = tok(words, is_split_into_words=True, return_tensors="pt")
            first = [enc.word_ids().index(i) for i in range(len(words))]
            with torch.no_grad():
                logits.append(model(**enc).logits[0, first])
        assert [model.config.id2label[i] for i in torch.stack(logits).mean(0).argmax(-1).tolist()] == expected


def test_a_runs_repr_shows_its_score(ner_data: dict[str, Path], tmp_path: Path) -> None:
    """`<finetune done at 'run'>` said nothing of the score a notebook user ran it for (issue 57, point 5)."""
    model = build_tiny_expanded(tmp_path / "model")
    run = greenadapt.finetune("ner", ner_data["train"], test=ner_data["test"], model=str(model), out=tmp_path / "run",
                              seeds=[1, 2], max_steps=2, batch_size=8, device="cpu")
    summary = run.manifest["stats"]["summary"]["test"]
    assert repr(run) == (f"<finetune done at {str(run.path)!r}: test f1 {100 * summary['mean']:.2f} ± {100 * summary['std']:.2f} "
                         "(mean pooling, 2 seeds)>")

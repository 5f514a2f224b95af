"""Centred sliding windows: every context wordpiece gets exactly one start and one end logit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenadapt.inference.qa.infer import LogitJob, QaRunner, SpecialIds, build_batch, stream_logits
from greenadapt.inference.qa.windows import Window, max_question_length, plan_windows, window_width

SPECIAL = SpecialIds(cls=2, sep=3, pad=0)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, int, int]:
    max_length = draw(st.integers(8, 512))
    question = draw(st.integers(0, max_question_length(max_length)))
    context = draw(st.integers(1, 4000))
    return context, question, max_length


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_active_parts_cover_every_wordpiece_exactly_once(layout: tuple[int, int, int]) -> None:
    context, question, max_length = layout
    windows = plan_windows(context, question, max_length)
    counts = np.zeros(context, dtype=np.int64)
    for window in windows:
        counts[window.active_start : window.active_stop] += 1
    assert (counts == 1).all()
    capacity = max_length - 3 - question
    for window in windows:
        assert 0 <= window.span_start <= window.active_start < window.active_stop <= window.span_stop <= context
        assert window.span_stop - window.span_start == min(capacity, context)
        assert window.input_length(question) <= max_length


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_active_window_is_centred_with_right_first_fill(layout: tuple[int, int, int]) -> None:
    context, question, max_length = layout
    width = window_width(max_length, question)
    for window in plan_windows(context, question, max_length):
        left = window.active_start - window.span_start
        right = window.span_stop - window.active_stop
        room_left, room_right = window.active_start, context - window.active_stop
        if left < room_left and right < room_right:
            # Neither side ran out: the fill alternates right, left, right, ...
            assert right - left in (0, 1)
        if window.active_stop - window.active_start > width:
            # Merged windows only arise when the inputs would have been identical.
            assert window.span_start == 0 or window.span_stop == context


def test_paper_width_for_bert() -> None:
    assert window_width(512, 9) == 250  # floor((509 - 9) / 2)
    windows = plan_windows(10_000, 9, 512)
    assert windows[1].active_start == 250 and windows[1].active_stop == 500
    assert windows[1].span_start == 250 - 125 and windows[1].span_stop == 500 + 125


def test_short_context_runs_once() -> None:
    # 100 wordpieces fit one input: the two paper windows would be the same input, so they merge.
    assert plan_windows(100, 10, 512) == [Window(0, 100, 0, 100)]


def test_build_batch_layout() -> None:
    context = np.arange(100, 140)
    job = LogitJob("q", np.array([50, 51, 52]), context, SPECIAL)
    short = LogitJob("r", np.array([60]), np.arange(200, 205), SPECIAL)
    window = plan_windows(len(context), 3, 20)[1]
    ids, types, mask = build_batch([(job, window), (short, Window(0, 5, 0, 5))])
    length = window.input_length(3)
    assert ids[0, :5].tolist() == [2, 50, 51, 52, 3]
    assert ids[0, 5 : length - 1].tolist() == context[window.span_start : window.span_stop].tolist()
    assert ids[0, length - 1] == 3
    assert types[0, :5].tolist() == [0] * 5 and (types[0, 5:length] == 1).all()
    offset = window.active_offset(3)
    assert ids[0, offset : offset + window.active_stop - window.active_start].tolist() == list(
        context[window.active_start : window.active_stop]
    )
    assert mask[1].tolist() == [1] * 9 + [0] * (ids.shape[1] - 9)  # [CLS] q [SEP] 5 pieces [SEP]
    assert (ids[1, 9:] == SPECIAL.pad).all() and (types[1, 9:] == 0).all()


class EchoRunner(QaRunner):
    """Start logit = the input id at that position, end logit = its negation: shows where each logit came from."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def logits(self, input_ids: np.ndarray, token_types: np.ndarray, attention: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append(len(input_ids))
        values = input_ids.astype(np.float32) + 0.5
        return values, -values


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 900), st.integers(0, 6)), min_size=1, max_size=6),
    st.integers(8, 64),
    st.integers(1, 9),
)
def test_stream_scatters_each_active_logit_to_its_wordpiece(
    jobs_spec: list[tuple[int, int]], max_length: int, batch_size: int
) -> None:
    rng = np.random.default_rng(len(jobs_spec) * 1000 + max_length)
    jobs = [
        LogitJob(i, rng.integers(10, 99, size=min(q, max_question_length(max_length))), rng.integers(1000, 30000, size=c), SPECIAL)
        for i, (c, q) in enumerate(jobs_spec)
    ]
    runner = EchoRunner()
    seen = {}
    for job, start, end in stream_logits(runner, jobs, max_length=max_length, batch_size=batch_size):
        assert job.key not in seen
        seen[job.key] = True
        assert start.shape == end.shape == job.context_ids.shape
        np.testing.assert_array_equal(start, job.context_ids + 0.5)
        np.testing.assert_array_equal(end, -(job.context_ids + 0.5))
    assert len(seen) == len(jobs)
    assert all(size <= batch_size for size in runner.calls)


@pytest.fixture(scope="module")
def tiny_qa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import build_tiny_bert

    return build_tiny_bert(tmp_path_factory.mktemp("qa-win") / "model", head="qa")


def test_real_model_logits_match_a_direct_call_and_ignore_batching(tiny_qa: Path) -> None:
    import torch
    from transformers import AutoModelForQuestionAnswering

    model = AutoModelForQuestionAnswering.from_pretrained(tiny_qa).eval()
    runner = QaRunner(model, torch.device("cpu"))
    rng = np.random.default_rng(0)
    short = LogitJob("short", np.array([20, 21]), rng.integers(5, 150, size=30), SPECIAL)
    long = LogitJob("long", np.array([22, 23, 24]), rng.integers(5, 150, size=400), SPECIAL)
    single = {job.key: (s, e) for job, s, e in stream_logits(runner, [short, long], max_length=64, batch_size=1)}
    batched = {job.key: (s, e) for job, s, e in stream_logits(runner, [short, long], max_length=64, batch_size=5)}
    for key in single:
        np.testing.assert_allclose(single[key][0], batched[key][0], atol=1e-5)
        np.testing.assert_allclose(single[key][1], batched[key][1], atol=1e-5)
    # A context that fits one input gets exactly the logits of [CLS] Q [SEP] C [SEP] with segment ids 0/1.
    ids = np.concatenate([[2], short.question_ids, [3], short.context_ids, [3]])
    types = np.array([0] * 4 + [1] * (len(short.context_ids) + 1))
    with torch.no_grad():
        output = model(input_ids=torch.from_numpy(ids[None]), token_type_ids=torch.from_numpy(types[None]))
    np.testing.assert_allclose(single["short"][0], output.start_logits[0, 4:-1].numpy(), atol=1e-5)
    np.testing.assert_allclose(single["short"][1], output.end_logits[0, 4:-1].numpy(), atol=1e-5)

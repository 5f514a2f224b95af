"""T̂'s tokenizer.json: written fast for a million new words, and the same bytes json.dumps would write."""

from __future__ import annotations


def test_tokenizer_json_is_byte_for_byte_what_json_dumps_writes() -> None:
    import json

    from greenadapt.families.wordpiece import tokenizer_json

    tokens = ["[PAD]", "the", 'quo"te', "back\\slash", "tab\there", "naïve", "β-blocker", "\u2028line", "emoji😀", "##ing"]
    spec = {"version": "1.0", "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"old": 0}}, "normalizer": None}
    expected = json.dumps({**spec, "model": {**spec["model"], "vocab": {t: i for i, t in enumerate(tokens)}}}, ensure_ascii=False)
    assert tokenizer_json(spec, tokens) == expected
    assert json.loads(tokenizer_json(spec, []))["model"]["vocab"] == {}

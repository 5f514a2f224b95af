"""Tiny models of the three tokenizer families, built in code with tokenizers trained here.

- ``roberta``: RoBERTa, byte-level BPE (``RobertaTokenizer``, ``add_prefix_space`` off, as published);
- ``modernbert``: ModernBERT (its own config class), byte-level BPE loaded by the generic fast class;
- ``deberta``: DeBERTa-v2/v3, Unigram with a Metaspace pre-tokenizer (``DebertaV2Tokenizer``).

The tokenizers are trained on general text only, so the domain words of :data:`DOMAIN_TEXT` are split
into several pieces by T_LM, as a real model splits "tachycardia".
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

FAMILIES = ("roberta", "modernbert", "deberta")
GENERAL_WORDS = (
    "the of and in to a was with for were that by on patients is as at from this be an or study which are results "
    "we not these have has been cells cell treatment clinical between high level levels human risk effect group "
    "after during both among two one more most than other also may can could did first case cases age women men "
    "blood heart rate disease diseases card car cardiac ta chy leu mia mel oma ins ulin gli kin ase sep sis"
).split()
DOMAIN_WORDS = ("tachycardia", "leukemia", "melanoma", "insulin", "glioma", "kinase", "sepsis", "carcinoma")


def general_text(lines: int = 1500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(GENERAL_WORDS, k=rng.randint(5, 15))) + rng.choice([".", ",", "", " ."]) for _ in range(lines)]


def domain_text(lines: int = 3000, seed: int = 1) -> list[str]:
    """Domain sentences: general words with the domain words mixed in (what word2vec learns them from)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = rng.choices(GENERAL_WORDS, k=rng.randint(6, 14))
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(DOMAIN_WORDS))
        out.append(" ".join(words) + ".")
    return out


def _train_bpe(vocab_size: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(general_text(), trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>")))
    return tokenizer


def _train_unigram(vocab_size: int) -> object:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" {2,}", " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"],
                                      unk_token="[UNK]", show_progress=False)
    tokenizer.train_from_iterator(general_text(), trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return tokenizer


def build_family_model(family: str, folder: Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a randomly initialised tiny masked-LM of ``family`` with its own trained tokenizer to ``folder``."""
    import torch
    from transformers import (
        DebertaV2Config,
        DebertaV2ForMaskedLM,
        ModernBertConfig,
        ModernBertForMaskedLM,
        PreTrainedTokenizerFast,
        RobertaConfig,
        RobertaForMaskedLM,
    )

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    common = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 2, "intermediate_size": 2 * hidden}
    if family == "deberta":
        backend = _train_unigram(400)
        special = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"}
        config = DebertaV2Config(vocab_size=backend.get_vocab_size(), max_position_embeddings=128,
                                 pad_token_id=backend.token_to_id("[PAD]"), **common)
        model = DebertaV2ForMaskedLM(config)
        tokenizer_class = "DebertaV2Tokenizer"
    else:
        backend = _train_bpe(420)
        special = {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
                   "unk_token": "<unk>", "mask_token": "<mask>"}
        if family == "roberta":
            config = RobertaConfig(vocab_size=backend.get_vocab_size(), max_position_embeddings=130,
                                   pad_token_id=backend.token_to_id("<pad>"), **common)
            model = RobertaForMaskedLM(config)
            tokenizer_class = "RobertaTokenizer"
        elif family == "modernbert":
            config = ModernBertConfig(vocab_size=backend.get_vocab_size(), max_position_embeddings=128, global_attn_every_n_layers=2,
                                      local_attention=16, pad_token_id=backend.token_to_id("<pad>"),
                                      bos_token_id=backend.token_to_id("<s>"), eos_token_id=backend.token_to_id("</s>"),
                                      cls_token_id=backend.token_to_id("<s>"), sep_token_id=backend.token_to_id("</s>"), **common)
            model = ModernBertForMaskedLM(config)
            tokenizer_class = "PreTrainedTokenizerFast"
        else:
            raise ValueError(family)
    model.save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=128, **special)
    tokenizer.save_pretrained(folder)
    import json

    config_path = folder / "tokenizer_config.json"
    saved = json.loads(config_path.read_text(encoding="utf-8"))
    saved["tokenizer_class"] = tokenizer_class
    config_path.write_text(json.dumps(saved, indent=2), encoding="utf-8")
    return folder


def assert_loads_without_parsing_its_vocabulary_in_python(folder: Path) -> None:
    """tokenizer_config.json lists the added tokens, so transformers does not parse the whole tokenizer.json in Python
    to find them (~1 CPU-s of a million-word T̂'s load); the tokenizer it loads is the one it loads without the list."""
    import transformers.tokenization_utils_base as base
    from transformers import AutoTokenizer

    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    written = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    assert config["added_tokens_decoder"] == {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in written}
    parsed: list[str] = []
    real_load = base.json.load
    base.json.load = lambda handle, *a, **k: parsed.append(Path(handle.name).name) or real_load(handle, *a, **k)
    try:
        fast = AutoTokenizer.from_pretrained(folder)
    finally:
        base.json.load = real_load
    # A class of its own (BertTokenizer) is rebuilt from the file's vocabulary, once; TokenizersBackend reads it in Rust.
    assert parsed.count("tokenizer.json") == (config.get("tokenizer_class") != "TokenizersBackend"), parsed
    without = folder.with_name(folder.name + "-without")
    shutil.copytree(folder, without)
    (without / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "added_tokens_decoder"}))
    plain = AutoTokenizer.from_pretrained(without)
    text = f"{fast.cls_token} the patients {fast.mask_token} tachycardia {fast.sep_token} caf\u00e9"
    assert fast(text, text)["input_ids"] == plain(text, text)["input_ids"]
    assert str(fast.added_tokens_decoder) == str(plain.added_tokens_decoder) and fast.special_tokens_map == plain.special_tokens_map
    shutil.rmtree(without)

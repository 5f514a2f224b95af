"""The files of a base model folder that ``expand`` carries into the expanded one, and the ones it does not."""

from __future__ import annotations

import shutil
from fnmatch import fnmatch
from pathlib import Path

from greenadapt.adaptation.new_words import NEW_WORDS_FILE
from greenadapt.artifacts.model_card import CARD_FILE, SENTENCE_TRANSFORMERS_DIRS, SENTENCE_TRANSFORMERS_FILES

# Top-level files that hold weights (rewritten as model.safetensors) or are
# rewritten here; copying them would leave stale, mismatched copies.
NOT_COPIED = (
    "*.safetensors",
    "*.safetensors.index.json",
    "*.bin",
    "*.bin.index.json",
    "*.h5",
    "*.msgpack",
    "*.ckpt*",
    "*.onnx",
    "*.ot",
    "*.pt",
    "*.pth",
    "*.gguf",
    "config.json",
    "manifest.json",
    NEW_WORDS_FILE,
    CARD_FILE,
    *SENTENCE_TRANSFORMERS_FILES,
)
DIRS_NOT_COPIED = ("onnx", "openvino", *SENTENCE_TRANSFORMERS_DIRS)


def copy_other_files(model_path: Path, dest: Path) -> None:
    """Every file and folder of ``model_path`` but the weights, the tokenizer and what expand writes itself."""
    from greenadapt.adaptation.domain_tokenizer import TOKENIZER_FILES
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    for child in sorted(model_path.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            if child.name != GENERAL_TOKENIZER_DIR and not any(fnmatch(child.name, p) for p in DIRS_NOT_COPIED):
                shutil.copytree(child, dest / child.name, ignore=shutil.ignore_patterns(".*"))
        elif child.is_file() and child.name not in TOKENIZER_FILES and not any(fnmatch(child.name, p) for p in NOT_COPIED):
            shutil.copyfile(child, dest / child.name)

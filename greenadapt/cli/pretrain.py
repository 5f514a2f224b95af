"""`greenadapt pretrain`: continued masked-LM pretraining (DAPT), optionally with G-MAP memory; --eval-only."""

from __future__ import annotations

import json
import sys
from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import emit
from greenadapt.runners.pretrain.settings import PretrainSettings


def _show(result: Any, as_json: bool) -> None:
    if isinstance(result, dict):  # --eval-only: the held-out losses
        if as_json:
            sys.stdout.write(json.dumps(result, indent=2) + "\n")
        else:
            for name, scores in result["results"].items():
                sys.stdout.write(f"{name}: held-out MLM loss {scores['loss']:.4f}, perplexity {scores['perplexity']:.2f} "
                                 f"({scores['targets']} targets)\n")
        return
    if result.manifest:  # a non-zero rank under torchrun: rank 0 reports
        from greenadapt.runners.pretrain.run import summary_line

        emit(result.manifest, summary_line(result), as_json=as_json)


declared_command(PretrainSettings, api.pretrain, _show,
                 help="Continue masked-LM training on a domain corpus (the DAPT baseline); output loads in finetune, qa, expand and "
                      "transformers.")

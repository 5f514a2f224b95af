"""Multi-task fine-tuning (``greenadapt multitask``): one shared encoder, PALs and a head per task.

Modules: ``settings`` (the command's options), ``spec`` (task specifications
from ``--task`` options or a TOML file), ``sampling`` (which task each step
trains on), ``train`` (the loop, on the shared training runtime and batches),
``run`` (the stage function the CLI calls: training, scoring, the saved model).
One task of a run is loaded and predicted by :mod:`greenadapt.inference.multitask`.

Kept import-free so ``greenadapt --help`` does not load torch.
"""

from __future__ import annotations

"""Multi-task fine-tuning (``greenadapt multitask``): one shared encoder, PALs and a head per task.

Modules: ``spec`` (task specifications from ``--task`` options or a TOML
file), ``sampling`` (which task each step trains on), ``train`` (the loop,
built from ``greenadapt.finetune``'s views, batches and optimizers), ``run``
(the stage function the CLI calls, :func:`~greenadapt.runners.multitask.run.load_task`
and prediction for one task).

Kept import-free so ``greenadapt --help`` does not load torch.
"""

from __future__ import annotations

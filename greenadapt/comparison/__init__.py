"""``compare``: one recipe, several models, the same seeds; paired differences with their uncertainty and their cost.

``statistics`` (pure: paired differences over seeds, paired bootstrap over test
examples, the verdict), ``examples`` (per-example contributions to each task's
metric), ``run`` (the fine-tunings as resumable stages, the compare folder).
"""

import sys

# How compare's workers start (greenadapt.comparison.workers): spawned, each reading its caller's environment and
# folder of the moment; or, in the greenadapt program, which runs one command a process, forked from a server that
# imported the libraries once. Here rather than in the workers' module: the program sets it at every start.
worker_start_method = "spawn"


def fork_workers_from_a_server() -> None:
    """For the greenadapt program, before its one command: compare's workers are forked from a server that imported
    :data:`greenadapt.comparison.workers.FORKSERVER_PRELOAD` (where the platform has one: not Windows)."""
    global worker_start_method
    if sys.platform != "win32":
        worker_start_method = "forkserver"

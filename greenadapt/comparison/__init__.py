"""``compare``: one recipe, several models, the same seeds; paired differences with their uncertainty and their cost.

``statistics`` (pure: paired differences over seeds, paired bootstrap over test
examples, the verdict), ``examples`` (per-example contributions to each task's
metric), ``run`` (the fine-tunings as resumable stages, the compare folder).
"""

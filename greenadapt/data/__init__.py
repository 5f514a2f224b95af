"""Labelled task files: reading them (``task_files``, ``datasets_input``, ``squad``), writing predictions, scoring
(``metrics``, ``squad_metrics``).

Plain Python and NumPy: nothing here knows a model or a tokenizer.
"""

"""Bundled corpus recipes and the sample corpus (installed as ``greenadapt.corpora``).

Data only: the ``*.toml`` recipes and ``sample.txt.gz`` are read with
:mod:`importlib.resources` by :mod:`greenadapt.corpus.recipes`.
"""

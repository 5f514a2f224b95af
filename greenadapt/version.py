"""greenadapt's version: a leaf, so that the modules that record it (manifests) need not import the package root."""

__version__ = "0.1.0"

"""mhlo-cost: what a model costs, block by block, from its MHLO / StableHLO IR.

The names below load on first use (PEP 562), so that ``mhlo-cost --version`` or ``--help`` imports neither
jax nor pandas.
"""

__version__ = "0.1.0"

import os as _os

# XLA's C++ INFO lines ("PjRt-IFRT device count ...") on the first lowering mean nothing to a user; the
# level is read once, when jaxlib loads, so it is set here. Warnings and errors still show.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

#: name -> the module that defines it
_LAZY = {"Analysis": "analysis", "analyze": "analysis", "LoadError": "loader", "load": "loader",
         "AnalysisError": "visitors.row", "lower_model": "frontends.api",
         "Study": "study", "StudyOptions": "study"}

__all__ = ["Analysis", "AnalysisError", "LoadError", "Study", "StudyOptions", "analyze", "load", "lower_model",
           "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

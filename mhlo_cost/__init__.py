"""mhlo-cost: what a model costs, block by block, from its MHLO / StableHLO IR."""

__version__ = "0.1.0"

import os as _os

# XLA's C++ INFO lines ("PjRt-IFRT device count ...") on the first lowering mean nothing to a user; the
# level is read once, when jaxlib loads (below), so it is set here. Warnings and errors still show.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from .analysis import Analysis, analyze  # noqa: E402
from .loader import LoadError, load  # noqa: E402
from .visitors.base import AnalysisError  # noqa: E402
from .frontends.api import lower_model  # noqa: E402

__all__ = ["Analysis", "AnalysisError", "LoadError", "analyze", "load", "lower_model", "__version__"]

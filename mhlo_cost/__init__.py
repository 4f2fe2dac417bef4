"""mhlo-cost: what a model costs, block by block, from its MHLO / StableHLO IR."""

__version__ = "0.1.0"

from .analysis import Analysis, analyze  # noqa: E402
from .loader import LoadError, load  # noqa: E402
from .visitors.base import AnalysisError  # noqa: E402

__all__ = ["Analysis", "AnalysisError", "LoadError", "analyze", "load", "__version__"]

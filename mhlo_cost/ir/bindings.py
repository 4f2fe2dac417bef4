"""The StableHLO, MHLO, CHLO and Shardy dialects' Python bindings (registration, attribute classes), as
jaxlib's native extension modules.

``jaxlib.mlir.dialects.<name>`` re-exports these and adds the generated op classes, which mhlo-cost never
uses (the walk reads ops by name): importing the extensions alone spares the MLIR reader's child about 30 ms
of its start. Where a jaxlib lays them out otherwise, the dialect packages are imported instead.
"""
from __future__ import annotations

try:
    from jaxlib.mlir._mlir_libs import _chlo as chlo
    from jaxlib.mlir._mlir_libs import _mlirHlo as mhlo
    from jaxlib.mlir._mlir_libs import _sdy as sdy
    from jaxlib.mlir._mlir_libs import _stablehlo as stablehlo
except ImportError:  # pragma: no cover (another jaxlib's layout)
    from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

__all__ = ["chlo", "mhlo", "sdy", "stablehlo"]

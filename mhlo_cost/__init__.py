"""mhlo-cost: what a model costs, block by block, from its MHLO / StableHLO IR."""

__version__ = "0.1.0"

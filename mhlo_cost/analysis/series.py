"""Exact integer columns for pandas tables: :func:`int_series` (int64 while it fits, Python ints beyond)."""
from __future__ import annotations

_INT64_MAX = 2**63 - 1


def int_series(values: list[int], index=None) -> pd.Series:
    """An exact integer column: int64 while it fits, Python ints (object) beyond."""
    import pandas as pd  # here, not at the top: the summary needs no pandas (mhlo-cost report's start-up)

    if values and (max(values) > _INT64_MAX or min(values) < -_INT64_MAX):
        return pd.Series(values, dtype=object, index=index)
    return pd.Series(values, dtype="int64", index=index)


__all__ = ["int_series"]

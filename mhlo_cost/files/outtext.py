"""Text that other programs read: strict JSON and CSV cells a spreadsheet cannot evaluate.

* JSON (:func:`json_text`): never a bare ``Infinity`` or ``NaN`` (not JSON; strict parsers refuse them). A
  non-finite float is written as ``null`` and the payload gets a ``notes`` line that names its keys;
  ``json.dumps(..., allow_nan=False)`` then makes any other path an error, never invalid output.
* CSV (:func:`csv_cell`, :func:`csv_safe_frame`): a text cell that begins with ``=``, ``+``, ``-``, ``@``, a
  tab or a carriage return is a formula to a spreadsheet (OWASP, "CSV Injection"); it is written with a
  leading apostrophe, which spreadsheets read as "this is text". Numbers are never changed (a negative
  number stays a number), nor is text that is a plain number (``-1.5``).

No pandas at import: the summary view imports this without it.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

#: First characters that make a spreadsheet evaluate a cell (OWASP's list).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def csv_cell(v: Any) -> Any:
    """``v`` with a leading apostrophe where it is text that a spreadsheet would evaluate; anything else as is."""
    if isinstance(v, str) and v.startswith(FORMULA_START) and not _PLAIN_NUMBER.match(v):
        return "'" + v
    return v


def csv_safe_frame(df):
    """A copy of the DataFrame ``df`` whose text cells go through :func:`csv_cell` (number columns untouched)."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if col.dtype == object or str(col.dtype) in ("string", "str"):
            if any(isinstance(v, str) and v.startswith(FORMULA_START) for v in col):
                out[c] = [csv_cell(v) for v in col]
    return out


def _finite(obj: Any, path: str, found: list[str]) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        found.append(path)
        return None
    if isinstance(obj, dict):
        return {k: _finite(v, str(k), found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v, path, found) for v in obj]
    return obj


def json_text(payload: Any, *, indent: int | None = 2, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    """``payload`` as strict JSON text (one trailing newline): non-finite floats become ``null`` with a note."""
    found: list[str] = []
    clean = _finite(payload, "", found)
    if found and isinstance(clean, dict):
        keys = ", ".join(dict.fromkeys(k or "(value)" for k in found))
        notes = list(clean.get("notes") or []) if isinstance(clean.get("notes"), list) else []
        clean["notes"] = notes + [f"{len(found)} non-finite number(s) (inf or nan) written as null: {keys}"]
    return json.dumps(clean, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys, allow_nan=False) + "\n"

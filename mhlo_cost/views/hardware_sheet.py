"""``mhlo-cost hardware show`` and ``diff``: a profile's datasheet (every figure, its unit and its source note)
and two profiles side by side with the ratio of each figure, as one table in any of the plain formats."""
from __future__ import annotations

import difflib

from ..machines.datasheet import Row, figure
from ..network.sheet import profile_rows, references
from .render import render_frame

__all__ = ["close_names", "diff", "show"]


def _frame(rows: list[Row]):
    import pandas as pd

    return pd.DataFrame({"field": [r.key for r in rows], "value": [figure(r.value) for r in rows],
                         "unit": [r.unit for r in rows], "source": [r.note or "(the profile's source line)"
                                                                    for r in rows]})


def _head(hw) -> str:
    kind = f"system of {hw.chip}" if getattr(hw, "chip", "") else "chip"
    aliases = f" (aliases: {', '.join(hw.aliases)})" if hw.aliases else ""
    return (f"{hw.name}{aliases}: {hw.description}\n{kind}; vendor {hw.vendor or '-'}\n"
            f"source: {hw.source}\n\n")


def show(hw, fmt: str = "table") -> str:
    """Every figure of ``hw`` (a chip, or a system and then its chip under ``chip.``) in ``fmt``; the table
    format adds the profile's head and the documents its notes cite."""
    body = render_frame(_frame(profile_rows(hw)), fmt, "raw", wide=True)
    if fmt != "table":
        return body
    refs = references(hw)
    tail = "".join(f"  [{tag}] {text}\n" for tag, text in refs.items())
    return _head(hw) + body + (f"\nsources cited:\n{tail}" if tail else "")


def _ratio(a, b) -> str:
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    if not numeric or a == 0:
        return "" if numeric or a is None or b is None or a == b else "differs"
    return f"{b / a:.4g}"


def diff(a, b, fmt: str = "table") -> str:
    """The figures of ``a`` and ``b`` side by side (every field either has, in ``a``'s order then ``b``'s), with
    the ratio B/A of each number; ``-`` where a profile lacks the figure."""
    import pandas as pd

    ra, rb = ({r.key: r for r in profile_rows(hw)} for hw in (a, b))
    keys = list(ra) + [k for k in rb if k not in ra]
    val = {k: (ra[k].value if k in ra else None, rb[k].value if k in rb else None) for k in keys}
    df = pd.DataFrame({"field": keys,
                       a.name: [figure(val[k][0]) if val[k][0] is not None else "-" for k in keys],
                       b.name if b.name != a.name else f"{b.name} (2)":
                           [figure(val[k][1]) if val[k][1] is not None else "-" for k in keys],
                       "B/A": [_ratio(*val[k]) for k in keys],
                       "unit": [(ra.get(k) or rb[k]).unit for k in keys]})
    body = render_frame(df, fmt, "raw", wide=True)
    return body if fmt != "table" else f"{a.name} (A) -> {b.name} (B)\n\n" + body


def close_names(name: str, path=None, n: int = 5) -> list[str]:
    """Canonical names of the profiles (chips and systems, shipped and in ``path``) whose name or an alias is
    close to ``name``."""
    from ..machines.hardware import list_profiles
    from ..network.systems import file_profiles, list_systems

    chips, systems = file_profiles(path) if path else ({}, {})
    owner: dict[str, str] = {}
    for hw in [*chips.values(), *systems.values(), *list_profiles(), *list_systems()]:
        for label in (hw.name, *hw.aliases):
            owner.setdefault(label.lower(), hw.name)
    key = "-".join(name.strip().lower().replace("_", " ").split())
    found = difflib.get_close_matches(key, list(owner), n=3 * n, cutoff=0.6)
    found += [k for k in owner if key and (key in k or k in key) and k not in found]
    return list(dict.fromkeys(owner[k] for k in found))[:n]

"""FLOP baselines for CI: ``mhlo-cost baseline``, ``check`` and ``diff``.

A baseline is JSON a team keeps under version control beside its model::

    {"schema": "mhlo-cost/flops-baseline", "schema_version": 1, "tool_version": "0.1.0",
     "source": "model.mlir", "entry": "main", "blocks_method": "scope",
     "summary": {"gemm_flops": ..., ...},
     "blocks": [{"block": "spatial_blocks.0", "gemm_flops": ..., ...}, ...]}

Every count is an exact integer; keys are in a fixed order; there is no absolute path and no timestamp,
so that a baseline diffs cleanly in git and only changes when the counts do.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pandas as pd

from .. import __version__
from ..files.outtext import json_text
from ..files.read import FileRefused, read_settings

SCHEMA = "mhlo-cost/flops-baseline"
SCHEMA_VERSION = 1
METRICS = ("gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written",
           "comm_bytes", "ops")
TOTAL = "TOTAL"


class BaselineError(ValueError):
    """A baseline file that cannot be used; one line."""


@dataclass
class Counts:
    """Per-block and summary counts, from an IR file or a baseline."""

    source: str
    summary: dict[str, int]
    blocks: dict[str, dict[str, int]]  # in program order
    method: str = ""


def counts_from_analysis(analysis, blocks_df: pd.DataFrame, method: str) -> Counts:
    blocks: dict[str, dict[str, int]] = {}
    for rec in blocks_df.to_dict("records"):
        name = str(rec["block"])
        if name == TOTAL:
            continue
        if "part" in rec and rec.get("part"):
            name = f"{name}/{rec['part']}"
        if name in blocks:  # a baseline must never lose a row by overwriting it
            raise BaselineError(f"{analysis.source}: two block-table rows named {name!r}")
        blocks[name] = {m: int(rec[m]) for m in METRICS if m in rec}
    summary = {m: int(analysis.summary[m]) for m in METRICS if m in analysis.summary}
    return Counts(Path(analysis.source).name, summary, blocks, method)


def to_json(c: Counts) -> str:
    payload = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "source": c.source,
        "blocks_method": c.method,
        "summary": {m: c.summary[m] for m in METRICS if m in c.summary},
        "blocks": [{"block": name, **{m: v[m] for m in METRICS if m in v}} for name, v in c.blocks.items()],
    }
    return json_text(payload, indent=2, ensure_ascii=True)


def read_baseline(path: str | Path) -> Counts:
    p = Path(path)
    try:
        text = read_settings(p, "a baseline").decode("utf-8")
    except FileRefused as e:
        raise BaselineError(str(e).replace(": no such file", ": no such baseline file")) from None
    except UnicodeDecodeError as e:
        raise BaselineError(f"{path}: cannot read baseline: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BaselineError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    except RecursionError:
        raise BaselineError(f"{path}: JSON nested too deeply for a baseline") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise BaselineError(f"{path}: not a usable baseline: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BaselineError(f"{path}: not an mhlo-cost baseline (no \"schema\": \"{SCHEMA}\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise BaselineError(f"{path}: baseline schema version {data.get('schema_version')!r}, this mhlo-cost "
                            f"reads version {SCHEMA_VERSION}: regenerate it with `mhlo-cost baseline`")
    for key in ("summary", "blocks"):
        if key not in data:
            raise BaselineError(f"{path}: baseline has no {key!r}")
    summary = _ints(data["summary"], path, "summary")
    if not isinstance(data["blocks"], list):
        raise BaselineError(f"{path}: 'blocks' must be a list")
    blocks: dict[str, dict[str, int]] = {}
    for i, b in enumerate(data["blocks"]):
        if not isinstance(b, dict) or not isinstance(b.get("block"), str):
            raise BaselineError(f"{path}: blocks[{i}] has no block name")
        if b["block"] in blocks:
            raise BaselineError(f"{path}: block {b['block']!r} appears twice")
        blocks[b["block"]] = _ints({k: v for k, v in b.items() if k != "block"}, path, f"blocks[{i}]")
    return Counts(str(data.get("source", p.name)), summary, blocks, str(data.get("blocks_method", "")))


def _ints(d, path, where) -> dict[str, int]:
    if not isinstance(d, dict):
        raise BaselineError(f"{path}: {where} must be an object")
    out = {}
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:  # a count is never negative
            raise BaselineError(f"{path}: {where}.{k} must be a whole number >= 0 (a count), got {v!r}")
        out[k] = v
    missing = [m for m in METRICS if m not in out]
    if missing:
        raise BaselineError(f"{path}: {where} is missing {', '.join(missing)}")
    return out


def compare(base: Counts, now: Counts, metrics: tuple[str, ...] = METRICS, rtol: float = 0.0) -> pd.DataFrame:
    """Rows of what moved beyond ``rtol``: block, metric, baseline, now, delta, percent, status.

    Blocks present on one side only are rows of status ``added`` / ``removed`` (one per metric that is not
    zero: the counts that moved). The summary is compared as the block ``TOTAL``. One row per count moved.
    """
    rows = []

    tolerance = Fraction(rtol)  # exact: a float times a count past 2**1024 would overflow

    def moved(a: int, b: int) -> bool:
        if rtol == 0:
            return a != b
        return abs(b - a) > tolerance * max(abs(a), 1)

    for name in list(base.blocks) + [n for n in now.blocks if n not in base.blocks]:
        a, b = base.blocks.get(name), now.blocks.get(name)
        if a is None or b is None:
            status = "added" if a is None else "removed"
            src = b if a is None else a
            if not any(src.get(m, 0) for m in metrics):
                continue  # nothing of the checked metrics: no move
            for m in metrics:  # the counts that moved: a metric zero on both sides did not
                va = 0 if a is None else src.get(m, 0)
                vb = 0 if b is None else src.get(m, 0)
                if va != vb:
                    rows.append((name, m, va, vb, status))
            continue
        for m in metrics:
            if moved(a.get(m, 0), b.get(m, 0)):
                rows.append((name, m, a.get(m, 0), b.get(m, 0), "changed"))
    for m in metrics:
        if moved(base.summary.get(m, 0), now.summary.get(m, 0)):
            rows.append((TOTAL, m, base.summary.get(m, 0), now.summary.get(m, 0), "changed"))
    from ..analysis import int_series

    df = pd.DataFrame({
        "block": [r[0] for r in rows],
        "metric": [r[1] for r in rows],
        "baseline": int_series([r[2] for r in rows]),
        "now": int_series([r[3] for r in rows]),
        "delta": int_series([r[3] - r[2] for r in rows]),
        "percent": [_percent(r[2], r[3]) for r in rows],
        "status": [r[4] for r in rows],
    })
    return df


def _percent(a: int, b: int) -> str:
    """``100 (b - a) / a`` to 4 decimals, in integers (no float: counts may pass 2**1024)."""
    if a == 0:
        return "new" if b else "0"
    num, den = 100 * (b - a) * 10**4, abs(a)
    if a < 0:
        num = -num
    q = (2 * abs(num) + den) // (2 * den)  # half up
    sign = "-" if num < 0 and q else "+"
    return f"{sign}{q // 10**4}.{q % 10**4:04d}%"


def side_by_side(a: pd.DataFrame, b: pd.DataFrame, key: str, metrics: tuple[str, ...]) -> pd.DataFrame:
    """Two groupings joined on ``key``: ``metric_a``, ``metric_b``, ``metric_delta``; changed rows first."""
    from ..analysis import int_series

    a = a.set_index(key)
    b = b.set_index(key)
    names = list(a.index) + [n for n in b.index if n not in a.index]
    data: dict[str, list] = {key: names}
    changed = [False] * len(names)
    for m in metrics:
        va = [int(a.at[n, m]) if n in a.index and m in a.columns else 0 for n in names]
        vb = [int(b.at[n, m]) if n in b.index and m in b.columns else 0 for n in names]
        data[f"{m}_a"] = va
        data[f"{m}_b"] = vb
        data[f"{m}_delta"] = [y - x for x, y in zip(va, vb)]
        changed = [c or x != y for c, x, y in zip(changed, va, vb)]
    presence = ["both" if (n in a.index and n in b.index) else ("only A" if n in a.index else "only B")
                for n in names]
    data["status"] = ["changed" if c else "same" for c in changed]
    data["status"] = [p if p != "both" else s for p, s in zip(presence, data["status"])]
    order = sorted(range(len(names)), key=lambda i: (data["status"][i] == "same", i))
    out = {k: [v[i] for i in order] for k, v in data.items()}
    df = pd.DataFrame({k: (int_series(v) if k not in (key, "status") else v) for k, v in out.items()})
    return df


def counts_frame(c: Counts) -> pd.DataFrame:
    """A baseline's blocks (and TOTAL) as a table with a ``block`` column."""
    from ..analysis import int_series

    names = list(c.blocks) + [TOTAL]
    recs = list(c.blocks.values()) + [c.summary]
    data: dict[str, object] = {"block": names}
    for m in METRICS:
        data[m] = int_series([r.get(m, 0) for r in recs])
    return pd.DataFrame(data)

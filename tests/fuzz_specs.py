"""Sweep specs for the argument fuzz (:mod:`arg_fuzz`): a small ``[training]`` spec (and, now and then, a point
sweep's spec) with its keys mutated, written as TOML, plus flags of ``mhlo-cost sweep`` that a training spec
cannot honour. Each mutation says whether it must be refused (see :mod:`arg_fuzz`)."""
from __future__ import annotations

import json
import math

HUGE = 10**12


class Raw(str):
    """A value written into the TOML as it is (``8.0``, ``nan``, ``1e999``)."""


def toml_value(v) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(v)


def toml(spec: dict) -> str:
    """``spec`` as TOML: top-level keys, then its tables (a value that is not a dict under a table's name is
    written as a plain key)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in spec.items() if not isinstance(v, dict)]
    for name, table in spec.items():
        if isinstance(table, dict):
            lines.append(f"\n[{name}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def training_base() -> dict:
    return {"model": "gpt", "devices": 2, "hardware": "selene",
            "training": {"layers": 2, "hidden": 64, "heads": 2, "seq": 32, "vocab": 128, "global_batch": 2,
                         "micro_batch": [1], "recompute": ["selective"], "interleave": [1]}}


def point_base() -> dict:
    return {"model": "gpt", "devices": 1, "parallel": "none", "hardware": "h100",
            "options": {"layers": 1, "hidden": 64, "heads": 2, "tokens": 16, "batch": 1}}


NOTHING = "refuse"  # no configuration can run: every row skipped (a point sweep says so: exit 2)
POS = [(0, "refuse"), (-1, "refuse"), ("2", "refuse"), (Raw("2.0"), "refuse"), ([], "refuse"), (HUGE, "refuse"),
       (True, "refuse"), (Raw("nan"), "refuse"), (Raw("1e999"), "refuse"), ("", "refuse"), ("\uff12", "refuse")]
#: (table or None, key) -> [(value, expect)]; "DELETE" removes the key
TRAINING = {
    (None, "devices"): [(2, "any"), (4, "any"), (Raw("8.0"), "refuse"), ("8", "refuse"), ([2] * 50, "any"),
                        ([2, "x"], "refuse"), (3, NOTHING)] + POS,
    (None, "hardware"): [("selene", "any"), ("dgx-h100", "any"), ("h100", "any"), ("nosuch", "refuse"), (5, "refuse"),
                         ([], "refuse"), ("", "refuse"), ("selene\u200b", "refuse"), (["selene"] * 30, "any")],
    (None, "model"): [("gpt", "any"), ("nosuch", "refuse"), ("", "refuse"), (7, "refuse"), ("DELETE", "any")],
    (None, "steps"): [(3, "refuse")],
    (None, "training"): [(5, "refuse"), ("x", "refuse")],
    ("training", "tensor"): [(1, "any"), (2, "any"), ([1, 1, 1], "any"), (3, NOTHING)] + POS,
    ("training", "pipeline"): [(1, "any"), (2, "any"), (3, NOTHING)] + POS,
    ("training", "data"): [(1, "any"), (2, "any")] + POS,
    ("training", "micro_batch"): [([1], "any"), ([1, 2], "any"), (4, NOTHING)] + POS,
    ("training", "recompute"): [(["full"], "any"), (["selective", "full"], "any"), (["bogus"], "refuse"),
                                ([""], "refuse"), ([], "refuse"), (5, "refuse"), (["FULL"], "refuse")],
    ("training", "interleave"): [([1], "any"), ([2], "any")] + POS,
    ("training", "global_batch"): [(2, "any"), (4, "any"), ([2], "refuse"), (HUGE, "any")] + POS,
    ("training", "dp_comm"): [("zero", "any"), ("bogus", "refuse"), (3, "refuse")],
    ("training", "layers"): [(4, "any")] + POS,
    ("training", "hidden"): [(128, "any"), (63, "refuse")] + POS,
    ("training", "heads"): [(4, "any"), (3, "refuse")] + POS,
    ("training", "seq"): [(64, "any")] + POS,
    ("training", "vocab"): [(256, "any")] + POS,
    # a 10**12-wide FFN is a hypothetical the plan prices exactly (and says does not fit): not refused
    ("training", "ffn"): [(256, "any"), (HUGE, "any")] + [p for p in POS if p[0] != HUGE],
    ("training", "tensr"): [(2, "refuse")],
}
POINT = {
    (None, "devices"): [(HUGE, "refuse"), ([1] * 2001, "any"), (list(range(1, 2002)), "any"), (0, "refuse")],
    (None, "hardware"): [(["h100"] * 2001, "any"), ("nosuch", "refuse")],
    ("options", "layers"): [(0, "refuse"), (HUGE, "refuse"), (-1, "refuse")],
    ("options", "heads"): [(3, "refuse")],
}
#: flags given beside a [training] spec: (tokens, expect, why)
FLAGS = [
    (["--scheduler", "tcp://127.0.0.1:9"], "refuse", "a training sweep runs here: --scheduler ignored"),
    (["--strategies", "none:1"], "refuse", "point sweeps only"), (["--steps", "3"], "refuse", "point sweeps only"),
    (["--fuse", "elementwise"], "refuse", "point sweeps only"),
    (["--execution", "eager"], "refuse", "point sweeps only"),
    (["--layers", "4"], "refuse", "sizes are in [training]"), (["--dtype", "f32"], "refuse", "training is bf16"),
    (["--shape", "16_64_64"], "refuse", "stdit3 shapes"), (["--parallel", "none"], "refuse", "point sweeps only"),
    (["--conv-padding", "dense"], "refuse", "point sweeps only"), (["--devices", "4"], "any", "overrides the spec"),
    (["--hardware", "dgx-a100"], "any", "overrides the spec"), (["-j", "0"], "refuse", "no worker"),
    (["--best"], "any", "valid"), (["--no-cache"], "any", "valid"), (["--cache-dir", "{file}"], "refuse", "a file"),
    (["--format", "parquet"], "refuse", "parquet needs -o"), (["--format", "json"], "any", "valid"),
    (["-o", "{tmp}/w.csv"], "any", "valid"), (["-o", "{tmp}"], "refuse", "a folder"),
]


def _apply(spec: dict, table, key, value) -> None:
    target = spec if table is None else spec.setdefault(table, {})
    if not isinstance(target, dict):  # (the table itself replaced by an earlier mutation)
        return
    if isinstance(value, str) and value == "DELETE":
        target.pop(key, None)
    else:
        target[key] = value


def sweep_case(rng):
    """A sweep case: mutations of a [training] spec (or, one in five, a point spec), and perhaps a flag."""
    from arg_fuzz import Case

    training = rng.random() >= 0.2
    spec, table = (training_base(), TRAINING) if training else (point_base(), POINT)
    argv = ["sweep", "--spec", "{tmp}/spec.toml", "--cache-dir", "{cache}", "-q", "--format", "csv"]
    expects, whats = [], []
    for table_key in rng.sample(list(table), rng.choices((1, 2), weights=(7, 3))[0]):
        value, expect = rng.choice(table[table_key])
        _apply(spec, *table_key, value)
        expects.append(expect)
        shown = repr(value) if not isinstance(value, list) or len(value) < 6 else f"[{len(value)} values]"
        whats.append(f"{'.'.join(k for k in table_key if k)} = {shown}")
    if training and rng.random() < 0.3:
        tokens, expect, why = rng.choice(FLAGS)
        argv += tokens
        expects.append(expect)
        whats.append(f"{' '.join(tokens)} ({why})")
    return Case("sweep", tuple(argv), "refuse" if "refuse" in expects else "any", tuple(whats),
                (("spec.toml", toml(spec)),))


"""The small, fast configurations the fault harnesses run (issue 43), and the damage they plant in caches.

``WRITERS``: per command, two argument vectors that write ``-o {out}`` (or ``--plot {out}``) with different
bytes, so that after a kill the file can be told to be the old one, the new one, or neither. ``CACHES``: per
command with a cache, two vectors ``A`` and ``B`` (different keys) answering on standard output, with
``{cache}`` in them. ``DAMAGES``: what a damaged cache entry may look like, each a function of the entry's
path and of the path of a valid entry of another key.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "gpt_small.mlir")
GPT_SET = ["--set", "layers=1", "--set", "hidden=64", "--set", "heads=2", "--set", "vocab=128"]
SERVE = ["serve", "--model", "gpt", *GPT_SET, "--cache-dir", "{cache}", "-q"]
PLAN = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
        "--cache", "{cache}"]
LOWER = ["lower", "--model", "gpt", "--hidden", "64", "--heads", "2", "--tokens", "16", "--batch", "1", "-q"]
SWEEP = ["sweep", "--model", "gpt", "--layers", "1", "--hidden", "64", "--heads", "2", "--tokens", "16",
         "--batch", "1", "-j", "1", "--cache-dir", "{cache}", "-q"]

#: command -> (output file name, argv A, argv B): A and B write different bytes to {out}
WRITERS = {
    "report": ("r.txt", ["report", EXAMPLE, "--by", "block", "-q", "-o", "{out}"],
               ["report", EXAMPLE, "--by", "kind", "-q", "-o", "{out}"]),
    "blocks": ("b.csv", ["blocks", EXAMPLE, "-q", "-o", "{out}"],
               ["blocks", EXAMPLE, "--unit", "G", "-q", "-o", "{out}"]),
    "lower": ("l.mlir", [*LOWER, "--layers", "1", "-o", "{out}"], [*LOWER, "--layers", "2", "-o", "{out}"]),
    "serve": ("s.txt", [*SERVE, "--context", "32", "-o", "{out}"], [*SERVE, "--context", "64", "-o", "{out}"]),
    "train-plan": ("t.txt", [*PLAN, "-o", "{out}"], [*PLAN, "-t", "2", "-o", "{out}"]),
    "sweep": ("w.csv", [*SWEEP, "--hardware", "h100", "-o", "{out}"], [*SWEEP, "--hardware", "a100", "-o", "{out}"]),
    "serve-plot": ("p.png", [*SERVE, "--context", "32", "--batches", "1,2", "--plot", "{out}"],
                   [*SERVE, "--context", "64", "--batches", "1,2", "--plot", "{out}"]),
}
#: the commands a campaign runs by default (serve-plot on request: matplotlib is slow to import)
DEFAULT_WRITERS = ("report", "blocks", "lower", "serve", "train-plan", "sweep")

#: command -> (argv A, argv B, {entry category: how its file names look})
CACHES = {
    "sweep": ([*SWEEP, "--dtype", "bf16", "f32", "--hardware", "h100", "--format", "csv"],
              [*SWEEP[:6], "128", *SWEEP[7:], "--dtype", "bf16", "f32", "--hardware", "h100", "--format", "csv"],
              {"lowered": r"^lowered/", "results": r"^results/"}),
    "serve": ([*SERVE, "--context", "32"], [*SERVE, "--context", "64"],
              {"ir": r"\.mlir\.gz$", "meta": r"^[0-9a-f]+\.json$", "result": r"\.result\.json$"}),
    "train-plan": (PLAN, [*PLAN[:8], "64", *PLAN[9:]], {"layer": r"^layer-", "head": r"^head-"}),
}


def fill(argv: list, **values) -> list:
    """``argv`` with ``{out}``, ``{cache}``... replaced."""
    return [a.format(**values) if "{" in a else a for a in argv]


def category(rel: str, kinds: dict) -> str | None:
    """Which entry category a cache file (its path relative to the cache) is: the first pattern that matches."""
    import re

    return next((name for name, pattern in kinds.items() if re.search(pattern, rel)), None)


def entries(root: Path) -> set:
    """The cache's files, relative to ``root`` (temporary files aside)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")
            and not p.name.endswith(".tmp")}


# -- damaged entries ------------------------------------------------------------------------------------------


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _map_numbers(obj, f):
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, (int, float)):
        return f(obj)
    if isinstance(obj, list):
        return [_map_numbers(x, f) for x in obj]
    if isinstance(obj, dict):
        return {k: _map_numbers(v, f) for k, v in obj.items()}
    return obj


def _wrong_type(obj, depth: int = 0):
    """Every leaf of another type: numbers as strings, strings as numbers, lists as tables (the top stays)."""
    if isinstance(obj, dict):
        return {k: _wrong_type(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return {str(i): _wrong_type(v, depth + 1) for i, v in enumerate(obj)} if depth else obj
    if isinstance(obj, bool) or obj is None:
        return "yes"
    if isinstance(obj, (int, float)):
        return str(obj)
    return 12345


def _rewrite(path: Path, f) -> str | None:
    data = _json(path)
    if data is None:
        return "not JSON"
    text = f(data)
    path.write_text(text)
    return None


def truncated(path: Path, other: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def folder(path: Path, other: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("a folder where an entry should be\n")


def symlink_loop(path: Path, other: Path) -> None:
    path.unlink()
    os.symlink(path.name, path)  # points at itself: ELOOP on open


def wrong_types(path: Path, other: Path) -> str | None:
    return _rewrite(path, lambda d: json.dumps(_wrong_type(d)))


def nan(path: Path, other: Path) -> str | None:
    return _rewrite(path, lambda d: json.dumps(_map_numbers(d, lambda v: math.nan)))


def huge(path: Path, other: Path) -> str | None:
    marker = 1.2345e300
    return _rewrite(path, lambda d: json.dumps(_map_numbers(d, lambda v: marker)).replace("1.2345e+300", "1e999"))


def negative(path: Path, other: Path) -> str | None:
    return _rewrite(path, lambda d: json.dumps(_map_numbers(d, lambda v: -v if v else -1)))


def another_key(path: Path, other: Path | None) -> str | None:
    if other is None:
        return "no entry of another key"
    shutil.copyfile(other, path)
    return None


def wrong_schema(path: Path, other: Path) -> str | None:
    """A valid JSON object of another schema: every key renamed (an older format), a schema number."""
    return _rewrite(path, lambda d: json.dumps({"schema": 99, **({f"{k}_v0": v for k, v in d.items()}
                                                               if isinstance(d, dict) else {"data": d})}))


DAMAGES = {"truncated": truncated, "folder": folder, "symlink-loop": symlink_loop, "wrong-types": wrong_types,
           "nan": nan, "1e999": huge, "negative": negative, "another-key": another_key, "wrong-schema": wrong_schema}

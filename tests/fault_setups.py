"""The small, fast configurations the fault harnesses run (issue 43), and the damage they plant in caches.

``WRITERS``: per command, two argument vectors that write ``-o {out}`` (or ``--plot {out}``) with different
bytes, so that after a kill the file can be told to be the old one, the new one, or neither. ``CACHES``: per
command with a cache, two vectors ``A`` and ``B`` (different keys) answering on standard output, with
``{cache}`` in them, and the schema folders its entries are kept in. ``DAMAGES``: what a damaged cache entry
may look like, each a function of the entry's path and of the path of a valid entry of another key (None where
it does the damage, else why it cannot).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "gpt_small.mlir")
GPT_SET = ["--set", "layers=1", "--set", "hidden=64", "--set", "heads=2", "--set", "vocab=128"]
SERVE = ["serve", "--model", "gpt", *GPT_SET, "--cache-dir", "{cache}", "-q"]
PLAN = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
        "--cache-dir", "{cache}"]
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
    "plot": ("f.png", ["plot", EXAMPLE, "-q", "-o", "{out}"], ["plot", EXAMPLE, "--memory", "-q", "-o", "{out}"]),
    "baseline": ("base.flops.json", ["baseline", EXAMPLE, "--blocks", "scope", "--update", "-q", "-o", "{out}"],
                 ["baseline", EXAMPLE, "--blocks", "repeat", "--update", "-q", "-o", "{out}"]),
    "rules": ("rules.txt", ["rules", "-q", "-o", "{out}"], ["rules", "--format", "csv", "-q", "-o", "{out}"]),
    "calibrate": ("cal.toml", ["calibrate", "--quick", "--name", "a", "-q", "-o", "{out}"],
                  ["calibrate", "--quick", "--name", "b", "-q", "-o", "{out}"]),
}
#: the commands a campaign runs by default (serve-plot and plot on request: matplotlib is slow to import)
DEFAULT_WRITERS = ("report", "blocks", "lower", "serve", "train-plan", "sweep")
#: every writer of a file: the -o rule and a kill at each write hold for all
ALL_WRITERS = tuple(WRITERS)


def same_toml_name(data: bytes):
    """What tells a measured profile (``calibrate``: its figures differ run to run) from another: the profile's
    name and every key it holds, where it reads as TOML, else None (torn)."""
    import tomllib

    try:
        profiles = tomllib.loads(data.decode("utf-8"))["profile"]
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError):
        return None
    def keys(table, at=()):
        return [k for name, v in table.items() for k in ([at + (name,)] + (keys(v, at + (name,))
                                                                                if isinstance(v, dict) else []))]
    return keys(profiles) if data.endswith(b"\n") else None


#: command -> what a file's bytes are compared by, where they are not the same from run to run
FINGERPRINT = {"calibrate": same_toml_name}

#: command -> (argv A, argv B, the schema folders of its cache entries: ``<cache>/<schema>/<key>.entry``)
CACHES = {
    "sweep": ([*SWEEP, "--dtype", "bf16", "f32", "--hardware", "h100", "--format", "csv"],
              [*SWEEP[:6], "128", *SWEEP[7:], "--dtype", "bf16", "f32", "--hardware", "h100", "--format", "csv"],
              ("sweep/lowered", "sweep/results")),
    "serve": ([*SERVE, "--context", "32"], [*SERVE, "--context", "64"], ("serve/steps", "serve/figures")),
    "train-plan": (PLAN, [*PLAN[:8], "64", *PLAN[9:]], ("plan/layers",)),
}


def fill(argv: list, **values) -> list:
    """``argv`` with ``{out}``, ``{cache}``... replaced."""
    return [a.format(**values) if "{" in a else a for a in argv]


def category(rel: str) -> str:
    """The schema folder of a cache entry (its path relative to the cache root): ``sweep/results``."""
    return rel.rpartition("/")[0]


def entries(root: Path) -> set:
    """The cache's entries (every ``*.entry`` file under ``root``), relative to ``root``."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*.entry") if p.is_file()}


# -- damaged entries ------------------------------------------------------------------------------------------
# An entry is ``<cache>/<schema>/<key>.entry``: one line of JSON (``schema`` [name, version], ``key``, ``sha256`` of
# the payload's canonical JSON, a NUL byte and the blob, ``blob_bytes``, ``payload``), then the blob's bytes. The
# damages that change the payload seal it again (a checksum that matches), so that the payload's own check is what
# must refuse it; ``checksum`` is the one that leaves it unsealed.


def _split(path: Path) -> tuple:
    line, _, blob = path.read_bytes().partition(b"\n")
    return json.loads(line), blob


def _text(obj) -> str:
    """JSON as the cache writes it (sorted keys, no spaces), NaN and infinity let through."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _seal(path: Path, head: dict, blob: bytes, edit=lambda text: text) -> None:
    """Write ``head`` and ``blob`` to ``path`` with a checksum that matches the payload (``edit``: applied to the
    payload's text and the header's alike, before the checksum)."""
    payload = edit(_text(head["payload"]))
    head = dict(head, sha256=hashlib.sha256(payload.encode() + b"\0" + blob).hexdigest())
    path.write_bytes(edit(_text(head)).encode() + b"\n" + blob)


def _payload(path: Path, f, edit=lambda text: text) -> str | None:
    head, blob = _split(path)
    new = f(head["payload"])
    if new == head["payload"] and edit("x") == "x":
        return "no number in the payload"
    _seal(path, dict(head, payload=new), blob, edit)
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


def _has_number(obj) -> bool:
    return _map_numbers(obj, lambda v: None) != obj


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


def truncated(path: Path, other: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def not_json(path: Path, other: Path) -> None:
    path.write_bytes(b"\x00\xffnot JSON at all {\n")


def folder(path: Path, other: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("a folder where an entry should be\n")


def symlink_loop(path: Path, other: Path) -> None:
    path.unlink()
    os.symlink(path.name, path)  # points at itself: ELOOP on open


def wrong_types(path: Path, other: Path) -> str | None:
    return _payload(path, _wrong_type)


def _numbers(f):
    def damage(path: Path, other: Path) -> str | None:
        head, _ = _split(path)
        if not _has_number(head["payload"]):
            return "no number in the payload"
        return f(path)
    return damage


nan = _numbers(lambda path: _payload(path, lambda d: _map_numbers(d, lambda v: math.nan)))
huge = _numbers(lambda path: _payload(path, lambda d: _map_numbers(d, lambda v: 1.2345e300),
                                      lambda text: text.replace("1.2345e+300", "1e999")))
negative = _numbers(lambda path: _payload(path, lambda d: _map_numbers(d, lambda v: -v if v else -1)))


def another_key(path: Path, other: Path | None) -> str | None:
    if other is None:
        return "no entry of another key"
    shutil.copyfile(other, path)
    return None


def other_version(path: Path, other: Path) -> None:
    """A whole, sealed entry written by another version of its schema."""
    head, blob = _split(path)
    name, version = head["schema"]
    _seal(path, dict(head, schema=[name, version + 1]), blob)


def _flip_first(obj, done: list):
    """``obj`` with its first number one larger (or, where it has none, its first string one letter longer)."""
    if done[0]:
        return obj
    if isinstance(obj, dict):
        return {k: _flip_first(v, done) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_flip_first(v, done) for v in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool) and done[1] == "number":
        done[0] = True
        return obj + 1
    if isinstance(obj, str) and done[1] == "string":
        done[0] = True
        return obj[:-1] + ("0" if obj[-1:] != "0" else "1")
    return obj


def checksum(path: Path, other: Path) -> None:
    """The payload changed (one figure, as a flipped bit changes it) and the checksum left as it was."""
    head, blob = _split(path)
    kind = "number" if _has_number(head["payload"]) else "string"
    payload = _flip_first(head["payload"], [False, kind])
    path.write_bytes(_text(dict(head, payload=payload)).encode() + b"\n" + blob)


def resealed(path: Path, other: Path) -> None:
    """No damage: the entry written again as the damages above write it (the control: trusted, no note)."""
    head, blob = _split(path)
    _seal(path, head, blob)


DAMAGES = {"truncated": truncated, "not-json": not_json, "folder": folder, "symlink-loop": symlink_loop,
           "wrong-types": wrong_types, "nan": nan, "1e999": huge, "negative": negative, "another-key": another_key,
           "other-version": other_version, "checksum": checksum}

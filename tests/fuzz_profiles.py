"""Hostile hardware files, system files and sweep specs (issue 24, item 12): a generator and its runner.

Seeds are the shipped templates (a chip with a GEMM model and curve; a chip with a mesh and a cluster system)
and a small sweep spec. A mutation replaces a value anywhere in the document (a number, a string, a list
item, a whole table) with a hostile one (NaN, +-inf, 5e-324, 1e-308, 1e308, true, a negative, zero, a
string, an empty list or table), deletes a key, or adds an unknown one. Each variant runs through

* ``mhlo-cost hardware --hardware-file F``,
* ``mhlo-cost report program.mlir --hardware-file F --hardware NAME --format json`` (half with ``--fuse
  elementwise``), and, for specs, ``mhlo-cost sweep --spec S --format json``;

the exit must be 0 or 2 (never 70, nor any other), an error one line, and JSON output must parse with a strict
parser (no ``Infinity`` / ``NaN``). Used by tests/test_profiles_and_outputs.py (a few seeds) and as a
campaign: ``python tests/fuzz_profiles.py --variants 1000 --specs 30 --seed 24`` (``PYTHONPATH`` picks the
mhlo-cost under test; ``--keep DIR`` keeps each failing input).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import random
import sys
import tomllib
from pathlib import Path

FIX = Path(__file__).parent / "fixtures" / "reliability3" / "profiles"
PROGRAM = FIX / "program.mlir"
#: Values that break assumptions about a profile's numbers and types.
HOSTILE = (float("nan"), float("inf"), float("-inf"), 5e-324, 1e-308, 1e308, 1.7976931348623157e308, True,
           False, -1, 0, -0.0, 2 ** 63 - 1, "", "x", "=1+1", [], {}, [[float("nan"), float("nan")]], [0, 0],
           [[1e-320, 0.5]], [["a", 1]],
           # the edges of the stated ranges (mhlo_cost/machines/limits.py): valid, and must stay finite
           1e-6, 0.0001, 0.001, 0.008, 1, 1e6, 8e6, 1_000_000, [[1e-9, 0.0001], [1e9, 1]])
SPEC_SEED = {"model": "stdit3", "hardware": ["h100"], "strategies": ["none:1"], "dtype": ["bf16"], "steps": 1,
             "options": {"small": True, "depth": 1}}


def seeds() -> list[tuple[str, dict]]:
    """(name, document) of each hardware/system seed."""
    data = Path(__file__).parent.parent / "mhlo_cost" / "machines" / "data"
    chip = tomllib.loads((data / "hardware_template.toml").read_text())
    chip["profile"]["my-chip"]["gemm"]["curve"] = {"bf16": [[0.01, 0.3], [1.0, 0.7], [100.0, 0.8]]}
    system = tomllib.loads((data / "system_template.toml").read_text())
    return [("chip", chip), ("system", system)]


# ------------------------------------------------------------------------------------------------ TOML out

def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string for these characters
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_scalar(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def _key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "-_" for c in k) else json.dumps(k)


def toml_text(doc: dict, prefix: str = "") -> str:
    """``doc`` as TOML: scalars and lists first, then each sub-table as ``[a.b]`` (empty ones too)."""
    lines = [f"{_key(k)} = {_scalar(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            name = f"{prefix}.{_key(k)}" if prefix else _key(k)
            lines += ["", f"[{name}]", toml_text(v, name).rstrip("\n")]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ mutations

def _paths(doc, here=()) -> list[tuple]:
    """Every key path of ``doc`` (into tables and list items)."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(here + (k,))
        out += _paths(v, here + (k,))
    return out


def mutate(doc: dict, rng: random.Random, n: int | None = None) -> tuple[dict, list[str]]:
    """A copy of ``doc`` with 1 to 3 mutations, and what each did."""
    doc = copy.deepcopy(doc)
    did = []
    for _ in range(n or rng.randint(1, 3)):
        paths = _paths(doc)
        if not paths:
            break
        path = rng.choice(paths)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        kind = rng.random()
        if kind < 0.12 and isinstance(parent, dict):
            del parent[path[-1]]
            did.append(f"delete {'.'.join(map(str, path))}")
        elif kind < 0.18 and isinstance(parent, dict):
            parent["unknown_key"] = 1
            did.append(f"add unknown key beside {'.'.join(map(str, path))}")
        else:
            value = copy.deepcopy(rng.choice(HOSTILE))
            if isinstance(parent[path[-1]], dict) and rng.random() < 0.5:
                value = {}
            parent[path[-1]] = value
            did.append(f"{'.'.join(map(str, path))} = {_scalar(value) if not isinstance(value, dict) else '{}'}")
    return doc, did


def names(doc: dict) -> list[str]:
    """The profile and system names a document holds (those still strings)."""
    out = []
    for table in ("system", "profile"):
        if isinstance(doc.get(table), dict):
            out += [k for k in doc[table] if isinstance(k, str)]
    return out or ["my-chip"]


# ------------------------------------------------------------------------------------------------ running

def run(argv: list[str]) -> tuple[int, str, str]:
    """``mhlo-cost ARGV`` in this process: (exit, stdout, stderr)."""
    from mhlo_cost.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # pragma: no cover - main returns its codes
            rc = int(e.code or 0)
    return rc, out.getvalue(), err.getvalue()


def _strict(text: str) -> str | None:
    """None where ``text`` is strict JSON, else why not."""
    def refuse(name):
        raise ValueError(f"non-JSON constant {name}")
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as e:
        return str(e)
    return None


def problem(rc: int, out: str, err: str, json_out: str | None) -> str | None:
    """Why a run broke the promise (exit 0 or 2, one error line, strict JSON), None where it kept it."""
    if rc not in (0, 2):
        return f"exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}"
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("mhlo-cost: error:")]
        if len(errors) != 1 or "Traceback" in err:
            return f"exit 2 without one error line: {err.strip()[:200]!r}"
    if rc == 0 and json_out is not None:
        why = _strict(json_out)
        if why:
            return f"JSON output is not strict JSON: {why}"
    return None


def hardware_runs(path: Path, name: str, fuse: bool) -> list[tuple[str, list[str]]]:
    """The command lines one hardware-file variant runs through."""
    report = ["report", str(PROGRAM), "--hardware-file", str(path), "--hardware", name, "--format", "json", "-q"]
    return [("hardware", ["hardware", "--hardware-file", str(path)]),
            ("report", report + (["--fuse", "elementwise"] if fuse else []))]


EXITS: dict = {}  # exit code -> how many runs gave it (the campaign's tally)


def check_hardware_file(path: Path, name: str, fuse: bool = False) -> list[str]:
    """The problems of one hardware-file variant, one per command that broke the promise."""
    found = []
    for label, argv in hardware_runs(path, name, fuse):
        rc, out, err = run(argv)
        EXITS[f"{label} {rc}"] = EXITS.get(f"{label} {rc}", 0) + 1
        why = problem(rc, out, err, out if label == "report" else None)
        if why:
            found.append(f"{label}: {why}")
    return found


def check_spec(path: Path, out_json: Path, hardware_file: Path | None = None) -> list[str]:
    argv = ["sweep", "--spec", str(path), "--no-cache", "-j", "1", "-q", "-o", str(out_json), "--format", "json"]
    if hardware_file is not None:
        argv += ["--hardware-file", str(hardware_file)]
    if out_json.exists():
        out_json.unlink()
    rc, out, err = run(argv)
    EXITS[f"sweep {rc}"] = EXITS.get(f"sweep {rc}", 0) + 1
    ran = rc in (0, 1)  # sweep's exit 1: some points failed, their rows written all the same
    why = problem(0 if rc == 1 else rc, out, err, out_json.read_text() if ran and out_json.exists() else None)
    return [f"sweep: {why}"] if why else []


#: The largest model option (depth, hidden, ...) a spec variant keeps: ``depth = 1000000`` is a valid spec that
#: lowers a million-layer model (17 GB and counting after 10 minutes, as ``lower --depth 1000000`` would):
#: the size of a model is the user's choice, not a hostile profile.
MAX_OPTION = 64


def spec_variant(rng: random.Random) -> tuple[dict, list[str]]:
    doc, did = mutate(SPEC_SEED, rng)
    opts = doc.get("options")
    if isinstance(opts, dict):
        for k, v in opts.items():
            if isinstance(v, int) and not isinstance(v, bool) and v > MAX_OPTION:
                opts[k] = MAX_OPTION
    if rng.random() < 0.2:
        doc["models"] = rng.choice([5, "x", [5], [{}], [{"hf": 5, "inputs": 5}], [{"module": "m", "inputs": [[1]]}],
                                    [{"module": "m", "inputs": [["1x4:f32"]], "set": "a=1"}], {"a": 1}])
        did.append(f"models = {doc['models']!r}")
    return doc, did


def campaign(variants: int, specs: int, seed: int, work: Path, keep: Path | None) -> dict:
    """Run ``variants`` hardware/system variants and ``specs`` spec variants; counts and failures."""
    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    stats = {"hardware_variants": 0, "spec_variants": 0, "runs": 0, "exit_70": 0, "other_exit": 0,
             "bad_json": 0, "bad_error_line": 0, "failures": []}
    pool = seeds()

    def record(kind: str, text: str, problems: list[str], did: list[str]) -> None:
        for p in problems:
            stats["exit_70" if p.split(": ", 1)[1].startswith("exit 70") else
                  "bad_json" if "strict JSON" in p else "bad_error_line" if "one error line" in p else
                  "other_exit"] += 1
        if problems:
            stats["failures"].append({"kind": kind, "mutations": did, "problems": problems})
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{kind}_{len(stats['failures']):04d}.toml").write_text(
                    "# " + "; ".join(did) + "\n# " + "; ".join(problems) + "\n" + text)

    for i in range(variants):
        seed_name, base = pool[i % len(pool)]
        doc, did = mutate(base, rng)
        text = toml_text(doc)
        path = work / "hw.toml"
        path.write_text(text)
        name = rng.choice(names(doc))
        problems = check_hardware_file(path, name, fuse=rng.random() < 0.5)
        stats["hardware_variants"] += 1
        stats["runs"] += 2
        record(seed_name, text, problems, did)
    for i in range(specs):
        doc, did = spec_variant(rng)
        text = toml_text(doc)
        path = work / "spec.toml"
        path.write_text(text)
        hw_file = None
        if i % 3 == 2:  # a hostile chip in the spec's hardware list
            chip, cdid = mutate(pool[0][1], rng, 1)
            hw_file = work / "spec_hw.toml"
            hw_file.write_text(toml_text(chip))
            did = did + [f"hardware-file: {d}" for d in cdid]
            doc["hardware"] = ["my-chip"]
            path.write_text(toml_text(doc))
            chip_lines = "".join("# " + ln + "\n" for ln in toml_text(chip).splitlines())
            text = toml_text(doc) + "\n# hardware file:\n" + chip_lines
        problems = check_spec(path, work / "sweep.json", hw_file)
        stats["spec_variants"] += 1
        stats["runs"] += 1
        record("spec", text, problems, did)
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", type=int, default=200)
    p.add_argument("--specs", type=int, default=20)
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--work", default="/tmp/fuzz_profiles")
    p.add_argument("--keep", help="a folder for each failing input")
    args = p.parse_args(argv)
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    stats = campaign(args.variants, args.specs, args.seed, Path(args.work), Path(args.keep) if args.keep else None)
    failures = stats.pop("failures")
    stats["exits"] = dict(sorted(EXITS.items()))
    print(json.dumps(stats))
    for f in failures[:40]:
        print(f"{f['kind']}: {'; '.join(f['mutations'])} -> {'; '.join(f['problems'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

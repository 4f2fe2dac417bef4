"""(Re)write tests/golden/: what every view of the command line prints today, byte for byte.

    python scripts/make_golden.py              # every case (inputs/ kept as they are)
    python scripts/make_golden.py --relower    # lower the generated inputs again first (then every case)
    python scripts/make_golden.py -k gpt_small # only the cases whose name contains a string

The cases (:func:`cases`) are one list that tests/test_golden.py imports: each is one ``mhlo-cost`` command
run in process through :func:`mhlo_cost.cli.main`, in a scratch folder that holds the inputs as
``inputs/NAME.mlir`` (so titles name them the same way wherever it runs). What a case prints on stdout, or
writes with ``-o``, is its golden file, ``out/INPUT/CASE.EXT``; its exit status and stderr are in
``index.json``. See tests/golden/README.md for the rule that goes with them.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
FIXTURES = ROOT / "tests" / "fixtures"

#: Inputs lowered by ``mhlo-cost lower`` (stored in tests/golden/inputs/, so that the outputs do not depend
#: on lowering again): name -> the options of ``lower``.
LOWERED = {
    "stdit3_small": ("--model", "stdit3", "--small"),
    "gpt_l2": ("--model", "gpt", "--layers", "2"),
    "gpt_l2_train": ("--model", "gpt", "--layers", "2", "--train", "--remat", "block"),
    "stdit3_small_megatron4": ("--model", "stdit3", "--small", "--parallel", "megatron", "--devices", "4"),
}

#: The views: name -> the command and options that ask for it.
VIEWS = {
    "summary": ("report", "--by", "summary"),
    "op": ("report", "--by", "op"),
    "opname": ("report", "--by", "opname"),
    "kind": ("report", "--by", "kind"),
    "scope": ("report", "--by", "scope"),
    "scope2": ("report", "--by", "scope:2"),
    "tree": ("report", "--by", "tree"),
    "block": ("report", "--by", "block"),
    "block_parts": ("report", "--by", "block", "--parts"),
    "comm": ("report", "--by", "comm"),
    "phase": ("report", "--by", "phase"),
    "memory": ("report", "--by", "memory"),
    "blocks": ("blocks",),
}

#: Format -> the golden file's extension.
FORMATS = {"table": "txt", "csv": "csv", "json": "json", "markdown": "md"}
ESTIMATE = ("--hardware", "h100", "--fuse", "elementwise")
#: Views with a row per op: on the large inputs in CSV only (in the other formats they are the same rows,
#: and they would be most of the folder's size); gpt_l2 and the fixtures have them in every format.
PER_OP_VIEWS = ("op", "memory")
LARGE = ("gpt_small", "stdit3_small", "stdit3_small_megatron4", "gpt_l2_train")


@dataclass(frozen=True)
class Case:
    """One command: ``argv`` names its input as ``inputs/INPUT.mlir``; ``output`` is the file it writes with
    ``-o`` (None: its stdout is the golden file); the golden file is ``out/GROUP/NAME``."""
    group: str
    name: str
    argv: tuple[str, ...]
    output: str | None = None

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"


@dataclass(frozen=True)
class Result:
    exit: int
    stderr: str
    data: bytes


def inputs() -> dict[str, Path]:
    """Every input by name: the example, the small fixtures, the lowered programs (in tests/golden/inputs/)."""
    found = {"gpt_small": ROOT / "examples" / "gpt_small.mlir"}
    for path in sorted(FIXTURES.glob("*.mlir")) + sorted((FIXTURES / "reliability").glob("*.mlir")):
        if path.stem in found:
            raise SystemExit(f"two inputs named {path.stem}")
        found[path.stem] = path
    for name in LOWERED:
        found[name] = GOLDEN / "inputs" / f"{name}.mlir"
    return found


def _case(group: str, name: str, argv, output: str | None = None) -> Case:
    return Case(group, name, tuple(argv), output)


def _view_cases(name: str) -> list[Case]:
    src = f"inputs/{name}.mlir"
    found = []
    for view, opts in VIEWS.items():
        for fmt, ext in FORMATS.items():
            if name in LARGE and view in PER_OP_VIEWS and fmt != "csv":
                continue
            found.append(_case(name, f"{view}.{ext}", [*opts, src, "--format", fmt]))
        found.append(_case(name, f"{view}.h100_fuse.csv", [*opts, src, "--format", "csv", *ESTIMATE]))
    return found


def _extra_cases() -> list[Case]:
    """Options beyond a view and a format, on the inputs where they mean something."""
    g, s, t, m = "inputs/gpt_small.mlir", "inputs/stdit3_small.mlir", "inputs/gpt_l2_train.mlir", \
        "inputs/stdit3_small_megatron4.mlir"
    rows = [
        ("gpt_small", "summary.h100_steps30.txt", ["report", g, "--hardware", "h100", "--steps", "30"]),
        ("gpt_small", "summary.h100_fuse_steps30.json", ["report", g, *ESTIMATE, "--steps", "30", "--format", "json"]),
        ("gpt_small", "summary.h100_fuse.txt", ["report", g, *ESTIMATE]),
        ("gpt_small", "summary.h100_fuse.md", ["report", g, *ESTIMATE, "--format", "markdown"]),
        ("gpt_small", "block.h100_fuse_unfused.txt", ["report", g, "--by", "block", *ESTIMATE, "--attention", "unfused"]),
        ("gpt_small", "block.unitG.txt", ["report", g, "--by", "block", "--unit", "G"]),
        ("gpt_small", "block.unitG.csv", ["report", g, "--by", "block", "--unit", "G", "--format", "csv"]),
        ("gpt_small", "block.h100_fuse_wide.txt", ["report", g, "--by", "block", *ESTIMATE, "--wide"]),
        ("gpt_small", "op.h100_top10.txt", ["report", g, "--by", "op", "--hardware", "h100", "--top", "10"]),
        ("gpt_small", "op.top10.txt", ["report", g, "--by", "op", "--top", "10"]),
        ("gpt_small", "op.block_layers1_h100.txt", ["report", g, "--by", "op", "--block", "layers.1", "--hardware", "h100"]),
        ("gpt_small", "kind.scope_attn.txt", ["report", g, "--by", "kind", "--scope", "attn"]),
        ("gpt_small", "blocks.unitM_parts.csv", ["blocks", g, "--unit", "M", "--parts"]),
        ("gpt_small", "tree2.unitG_wide.txt", ["report", g, "--by", "tree:2", "--unit", "G", "--wide"]),
        ("gpt_small", "memory.fuse.txt", ["report", g, "--by", "memory", "--fuse", "elementwise"]),
        ("stdit3_small", "summary.h100_fuse_steps30.txt", ["report", s, *ESTIMATE, "--steps", "30"]),
        ("stdit3_small", "summary.h100_fuse_unfused.csv", ["report", s, *ESTIMATE, "--attention", "unfused", "--format", "csv"]),
        ("stdit3_small", "block_parts.h100_fuse_unitG_wide.txt", ["report", s, "--by", "block", "--parts", *ESTIMATE, "--unit", "G", "--wide"]),
        ("stdit3_small", "blocks.h100.csv", ["blocks", s, "--hardware", "h100"]),
        ("gpt_l2_train", "summary.h100_fuse_steps30.txt", ["report", t, *ESTIMATE, "--steps", "30"]),
        ("gpt_l2_train", "phase.h100_fuse_unitG.txt", ["report", t, "--by", "phase", *ESTIMATE, "--unit", "G"]),
        ("gpt_l2_train", "block_parts.h100_wide.txt", ["report", t, "--by", "block", "--parts", "--hardware", "h100", "--wide"]),
        ("gpt_l2", "memory.h100_fuse_wide.txt", ["report", "inputs/gpt_l2.mlir", "--by", "memory", *ESTIMATE, "--wide"]),
        ("stdit3_small_megatron4", "summary.dgx.txt", ["report", m, "--hardware", "dgx-h100"]),
        ("stdit3_small_megatron4", "summary.dgx.json", ["report", m, "--hardware", "dgx-h100", "--format", "json"]),
        ("stdit3_small_megatron4", "block.dgx_fuse.csv", ["report", m, "--by", "block", "--hardware", "dgx-h100", "--fuse", "elementwise", "--format", "csv"]),
        ("stdit3_small_megatron4", "block.dgx_wide.txt", ["report", m, "--by", "block", "--hardware", "dgx-h100", "--wide"]),
        ("stdit3_small_megatron4", "comm.dgx.csv", ["report", m, "--by", "comm", "--hardware", "dgx-h100", "--format", "csv"]),
        ("stdit3_small_megatron4", "comm.dgx.txt", ["report", m, "--by", "comm", "--hardware", "dgx-h100", "--wide"]),
        ("stdit3_small_megatron4", "blocks.dgx.csv", ["blocks", m, "--hardware", "dgx-h100"]),
        ("multi", "kind.two_files.txt", ["report", "inputs/small_stablehlo.mlir", "inputs/small_mhlo_pretty.mlir", "--by", "kind"]),
        ("multi", "blocks.two_files.csv", ["blocks", "inputs/gpt_l2.mlir", "inputs/gpt_small.mlir"]),
    ]
    return [_case(*row) for row in rows]


def _html_cases() -> list[Case]:
    """HTML pages (large) for a few representative inputs only, written with ``-o``."""
    rows = [
        ("small_stablehlo", "page.html", []),
        ("gpt_small", "page.h100_fuse.html", list(ESTIMATE)),
        ("gpt_l2_train", "page.h100.html", ["--hardware", "h100"]),
        ("stdit3_small_megatron4", "page.dgx.html", ["--hardware", "dgx-h100"]),
    ]
    return [_case(g, n, ["report", f"inputs/{g}.mlir", "--format", "html", *opts, "-o", n], output=n)
            for g, n, opts in rows]


def _sweep_cases() -> list[Case]:
    """A sweep of two points (lowered in the sweep itself), one table; no cache, one process, no timing line."""
    argv = ["sweep", "--model", "stdit3", "--small", "--strategies", "none:1", "megatron:2", "--hardware", "h100",
            "--no-cache", "-j", "1", "-q", "-o", "sweep.csv"]
    return [_case("sweep", "sweep.csv", argv, output="sweep.csv")]


def cases() -> list[Case]:
    found = [c for name in inputs() for c in _view_cases(name)]
    found += _extra_cases() + _html_cases() + _sweep_cases()
    ids = [c.id for c in found]
    if len(set(ids)) != len(ids):
        raise SystemExit("two cases share a name")
    return found


def prepare(work: Path) -> None:
    """``work/inputs/NAME.mlir`` for every input, and a ledger of written files of its own."""
    (work / "inputs").mkdir(parents=True, exist_ok=True)
    for name, path in inputs().items():
        shutil.copyfile(path, work / "inputs" / f"{name}.mlir")


@contextlib.contextmanager
def _inside(work: Path):
    """cwd = ``work``, stdout and stderr captured as bytes (UTF-8, as a terminal would get them), the ledger
    of written files (``-o``) in ``work``."""
    saved_cwd, saved_env = os.getcwd(), os.environ.get("XDG_STATE_HOME")
    out, err = io.BytesIO(), io.BytesIO()
    out_t = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    err_t = io.TextIOWrapper(err, encoding="utf-8", newline="", write_through=True)
    os.chdir(work)
    os.environ["XDG_STATE_HOME"] = str(work / ".state")
    try:
        with contextlib.redirect_stdout(out_t), contextlib.redirect_stderr(err_t):
            yield out, err
    finally:
        os.chdir(saved_cwd)
        if saved_env is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved_env


def run_case(case: Case, work: Path) -> Result:
    """Run one case in ``work`` (made by :func:`prepare`): its exit status, stderr and golden bytes."""
    from mhlo_cost.cli import main

    if case.output:
        with contextlib.suppress(FileNotFoundError):
            (work / case.output).unlink()
    with _inside(work) as (out, err):
        code = main(list(case.argv))
        stdout, stderr = out.getvalue(), err.getvalue()
    data = (work / case.output).read_bytes() if case.output and code == 0 else stdout
    return Result(code, stderr.decode("utf-8"), data)


def lower(name: str, dest: Path) -> None:
    """Lower one generated input as a user does (``python -m mhlo_cost lower``, in a child process: lowered
    in process, the caller's own frames would enter the op locations)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(dest.parent / ".state"))
    subprocess.run([sys.executable, "-m", "mhlo_cost", "lower", *LOWERED[name], "-q", "--force", "-o", dest.name],
                   cwd=dest.parent, env=env, check=True)
    shutil.rmtree(dest.parent / ".state", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--relower", action="store_true", help="lower the generated inputs again first")
    parser.add_argument("-k", default="", help="only the cases whose id contains this")
    args = parser.parse_args(argv)
    for name in LOWERED:
        dest = GOLDEN / "inputs" / f"{name}.mlir"
        if args.relower or not dest.exists():
            lower(name, dest)
    chosen = [c for c in cases() if args.k in c.id]
    index_path = GOLDEN / "index.json"
    index = json.loads(index_path.read_text()) if args.k and index_path.exists() else {}
    if not args.k:
        shutil.rmtree(GOLDEN / "out", ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(work)
        for case in chosen:
            res = run_case(case, work)
            dest = GOLDEN / "out" / case.group / case.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(res.data)
            index[case.id] = {"argv": list(case.argv), "exit": res.exit, "stderr": res.stderr}
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1, ensure_ascii=False) + "\n")
    print(f"{len(chosen)} case(s) written under {GOLDEN}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

"""Blocks found in timm's families against the units each model holds.

    python benchmarks/timm_blocks.py                     # every family below (a few minutes on 2 cores)
    python benchmarks/timm_blocks.py --only regnety_002  # one (or several, comma-separated)

Each model is built by name (no weights), lowered by ``mhlo-cost lower --timm NAME --input 1x3x64x64`` and
its blocks found by the default collector. The units are counted on the model's own module tree, by the
class timm builds its repeated unit from (RegNet's ``Bottleneck``, DenseNet's ``DenseLayer``...). Columns:
model, how the blocks were found, blocks found, units in the model, whether the blocks' names are the
units' module paths, the first names found. The last line: ``K of N families: blocks = the model's units``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: model -> the classes of its repeated unit (their instances are the blocks a reader expects)
FAMILIES = {
    "regnetx_002": ("Bottleneck",),
    "regnety_002": ("Bottleneck",),
    "nfnet_f0": ("NormFreeBlock",),
    "legacy_xception": ("Block",),
    "densenet121": ("DenseLayer",),
    "dpn68": ("DualPathBlock",),
    "resnest14d": ("ResNestBottleneck",),
    "res2net50_14w_8s": ("Bottle2neck",),
    "tresnet_m": ("BasicBlock", "Bottleneck"),
    "dla34": ("DlaBasic",),
    "hrnet_w18_small": ("BasicBlock", "Bottleneck"),
    "cspresnet50": ("BottleneckBlock",),
    "vovnet39a": ("OsaBlock",),
    "ghostnet_100": ("GhostBottleneck",),
    "rexnet_100": ("LinearBottleneck",),
    "selecsls42b": ("SelecSlsBlock",),
}
INPUT = "1x3x64x64"


def run_one(name: str, tmp: str) -> dict:
    """One row; a failure is the row's note, never an exception."""
    from mhlo_cost import analyze
    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.cli import main
    from mhlo_cost.lower.frontends import hub

    row = {"model": name, "method": "", "found": "", "units": "", "same": "", "names": ""}
    path = os.path.join(tmp, f"{name}.mlir")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = main(["lower", "--timm", name, "--input", INPUT, "-o", path, "-q"])
        if rc != 0:
            row["names"] = (err.getvalue().strip().splitlines() or [f"exit {rc}"])[-1][:100]
            return row
        blocks = assign_blocks(analyze(path))
        model = hub.build("timm", name, None, {})
        units = sorted(p for p, m in model.named_modules() if type(m).__name__ in FAMILIES[name])
        found = [b.name for b in blocks.blocks]
        row.update(method=blocks.method, found=str(blocks.count), units=str(len(units)),
                   same="y" if sorted(n.replace("/", ".") for n in found) == units else "n",
                   names=(", ".join(found[:3]) + (" ..." if len(found) > 3 else ""))[:80])
    except Exception as e:  # noqa: BLE001 - a row, never a crash of the table
        row["names"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e).strip() else ''}"
    return row


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines += ["  ".join(r[c].ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated models (default: all)")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        print(f"timm_blocks: unknown model(s) {', '.join(unknown)}; known: {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_one(n, tmp) for n in names]
    print(table(rows))
    print(f"{sum(r['same'] == 'y' for r in rows)} of {len(rows)} families: blocks = the model's units")
    return 0


if __name__ == "__main__":
    sys.exit(main())

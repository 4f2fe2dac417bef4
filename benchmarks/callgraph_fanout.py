"""How long does a call graph that fans out take? (issue 24, item 5: O(functions), not O(call paths)).

Writes call DAGs (tests/callgraph_dags.py): 10**5 paths (fan-out 10, depth 5), 10**6 paths (fan-out 10,
depth 6, and fan-out 2, depth 20) and 2**40 paths (fan-out 2, depth 40), each with shared and with distinct
call-site scopes, and times per file, the best of ``--repeat`` runs:

* analysis: the walk, the op table's summary, the memory profile and the h100 estimate with elementwise
  fusion, in this process (parse included);
* process: ``mhlo-cost report FILE --hardware h100 --fuse elementwise`` as a user runs it (interpreter
  start and imports included);

and prints the op table's rows, the exact FLOPs (checked against leaf FLOPs x paths) and the peak bytes.

    python benchmarks/callgraph_fanout.py [--repeat 3] [--no-process]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from callgraph_dags import LEAF, fanout  # noqa: E402

CASES = (("10^5", 5, 10), ("10^6", 6, 10), ("2^20", 20, 2), ("2^40", 40, 2))


def analysis_once(path: Path) -> tuple[float, int, int, int]:
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.roofline.memory import fused_profile
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.roofline import Roofline

    t = time.perf_counter()
    a = analyze(str(path), AnalysisOptions(dataflow=True))
    s = a.summary
    rf = Roofline(a, get_profile("h100"), "elementwise")
    rf.totals()
    fused_profile(a, rf.fusion)
    return time.perf_counter() - t, len(a.rows), s["gemm_flops"], s["peak_bytes"]


def process_once(path: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(path), "--hardware", "h100", "--fuse",
                    "elementwise", "-q"], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-process", action="store_true", help="time the analysis in this process only")
    args = ap.parse_args()
    print(f"{'paths':>6} {'scopes':>8} {'bytes':>6} {'rows':>5} {'analysis s':>10} {'process s':>9}  gemm_flops")
    with tempfile.TemporaryDirectory() as tmp:
        for label, depth, fan in CASES:
            for scopes in ("same", "distinct"):
                path = Path(tmp) / f"fanout_{depth}_{fan}_{scopes}.mlir"
                path.write_text(fanout(depth, fan, scopes))
                runs = [analysis_once(path) for _ in range(args.repeat)]
                best, rows, flops, _peak = min(runs)
                assert flops == LEAF["gemm_flops"] * fan ** depth, (label, scopes, flops)
                proc = "" if args.no_process else f"{min(process_once(path) for _ in range(args.repeat)):.2f}"
                print(f"{label:>6} {scopes:>8} {path.stat().st_size:>6} {rows:>5} {best:>10.3f} {proc:>9}  {flops:,}")


if __name__ == "__main__":
    main()

"""Where the CPU of ``mhlo-cost report FILE -q`` goes: the reader child's start, then jaxlib's parse, the walk and the
rendering, each timed in fresh processes started as the child is (``bench_analyze.py --breakdown`` runs it); the
walk's fork (:mod:`mhlo_cost.walk.split`: a large entry function's second part, walked alongside) and the render's
(the memory profile, computed alongside where the walk split) apart.

The child is the report's critical path: the caller's own process starts the child first and overlaps its own
imports with the child's start, then waits for the whole answer; the whole-process comparison measures both.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


#: One fresh process doing what the reader's child does for ``report FILE -q``, started as the child is (``-S``, the
#: caller's path, ``cli/child.py`` run as a file): its start (:func:`serve`'s imports), then the request (the
#: walk options as the command line makes them), timed by phase in CPU seconds; prints JSON.
BREAKDOWN = """
import json, sys, time
c0 = time.process_time()
path, options, sys.path[:], reader_file = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
import os, runpy
sys.stdin = open(os.devnull)
child = runpy.run_path(reader_file, run_name="child")["answer"].__globals__  # (run_path gives a copy)
child["serve"](walk=True)  # the child's imports; stdin is empty: it returns at once
start = time.process_time() - c0
from mhlo_cost.ir import reader
from mhlo_cost.analysis import isolated
phases = {}
import resource
def forks():  # the CPU of the children this process waited for: the walk's fork (mhlo_cost.walk.split)
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
def timed(space, name, label):
    f = space[name]
    def run(*a, **k):
        t, c = time.process_time(), forks()
        try:
            return f(*a, **k)
        finally:
            phases[label] = phases.get(label, 0.0) + time.process_time() - t
            phases[label + " fork"] = phases.get(label + " fork", 0.0) + forks() - c
    space[name] = run
timed(vars(reader), "parse", "parse")
timed(vars(isolated), "walk_loaded", "walk")
timed(child, "_answer_whole", "render")
data = open(path, "rb").read()
t = time.process_time()
reply = child["answer"]("text", data, path, options)
phases["answer"] = time.process_time() - t
c = forks()  # the render's fork (the memory profile alongside: mhlo_cost.walk.split.alongside), reaped after it answered
try:
    while True:
        os.waitpid(-1, 0)
except ChildProcessError:
    pass
phases["render fork"] = phases.get("render fork", 0.0) + forks() - c
phases["start"] = start
phases["rendered"] = reply[:1] == b"R"
print(json.dumps(phases))
"""


def breakdown(path: Path, runs: int, trees: dict[str, str], neutral: str) -> None:
    """The CPU seconds of the reader child's work for ``report FILE -q``, by phase (:data:`BREAKDOWN`), the median
    of ``runs`` fresh processes each, alternating the checkouts ``trees`` (tag -> folder, the first one's
    composition makes the request), run in the folder ``neutral``; prints one line a checkout."""
    first = next(iter(trees.values()))
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="1")
    asked = subprocess.run([sys.executable, "-c", OPTIONS, str(path)], check=True, capture_output=True, text=True,
                           env=dict(env, PYTHONPATH=os.pathsep.join([first, env.get("PYTHONPATH", "")])),
                           cwd=neutral).stdout.strip()
    got: dict = {tag: [] for tag in trees}
    for _ in range(runs):
        for tag, tree in trees.items():
            syspath = json.dumps([tree] + [p for p in sys.path[1:] if p and p != os.getcwd()])
            cmd = [sys.executable, "-S", "-c", BREAKDOWN, str(path), asked, syspath,
                   str(Path(tree) / "mhlo_cost" / "cli" / "child.py")]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=neutral, env=env).stdout
            got[tag].append(json.loads(out.splitlines()[-1]))
    for tag, done in got.items():
        med = {k: statistics.median(r.get(k, 0.0) for r in done) for k in ("start", "parse", "walk", "render",
                                                                             "answer", "walk fork", "render fork")}
        other = med["answer"] - med["parse"] - med["walk"] - med["render"]
        whole = "" if all(r["rendered"] for r in done) else " (the child did not render the whole answer)"
        fork = f" (+ {med['walk fork']:.3f} in its fork, alongside)" if med["walk fork"] else ""
        rfork = f" (+ {med['render fork']:.3f} in its fork, alongside)" if med["render fork"] else ""
        print(f"child CPU{tag}: start {med['start']:.3f} s, then parse {med['parse']:.3f}, walk {med['walk']:.3f}{fork}, "
              f"render {med['render']:.3f}{rfork}, other {other:.3f}: request {med['answer']:.3f} s (medians of "
              f"{len(done)}){whole}")


#: The walk options ``mhlo-cost report FILE -q`` sends its reader child (this checkout's composition).
OPTIONS = """
import sys
from mhlo_cost.analysis.isolated import WalkOptions
from mhlo_cost.studies.compose import wire
from mhlo_cost.studies.study import StudyOptions
from mhlo_cost.views.table import ViewRequest
print(WalkOptions(render=wire(StudyOptions(sys.argv[1]), ViewRequest(), "table")).to_json())
"""

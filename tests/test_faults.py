"""Issue 43's fault cases (``tests/fault_cases.py``: kills at every write, racing cache writers, damaged cache
entries, a full disk, a read-only folder, the -o rule, arguments that cannot be honoured, an argument fuzz), run
in a pytest process of their own.

The cases run each command in a forked child of the test process (a hook in the child kills it at its k-th write,
limits its file size, stops it between two cache writes). A process that has run JAX cannot be forked safely:
its thread pools (the MLIR context's, the CPU client's) come to the child without their threads, and a lowering
or a computation there waits for ever, or aborts on an inherited lock. Earlier tests of a whole session lower and
compute in this process, so the cases get a fresh one, which imports and forks but never runs JAX itself.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.faults,
              pytest.mark.skipif(not hasattr(os, "fork"), reason="the fault cases fork (os.fork)")]


def test_the_fault_cases_pass_in_a_process_of_their_own():
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(HERE / "fault_cases.py")]
    proc = subprocess.run(argv, cwd=HERE.parent, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "xpass" not in proc.stdout.lower(), tail

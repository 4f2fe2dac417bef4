"""Run :mod:`mhlo_cost._reader` in a child process: a crash, a hang or a memory bomb in jaxlib's MLIR
reader ends the child, never the caller.

The child gets a memory limit (address space) and a time limit that grow with the input; the parent gets
back bytecode that MLIR wrote, or one error line.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

_READER = Path(__file__).with_name("_reader.py")

#: Address space of the child: jaxlib's own mappings, plus room that grows with the input.
BASE_MEMORY = 1536 << 20
MEMORY_PER_INPUT_BYTE = 64
#: Seconds: a floor, plus time that grows with the input (text parses at several MB/s).
BASE_SECONDS = 20.0
SECONDS_PER_MB = 4.0

# Runs the reader file without putting its folder (which holds a ``types.py``) on sys.path.
_BOOT = "import runpy, sys; del sys.path[0]; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def limits(n_bytes: int) -> tuple[int, float]:
    """(memory in bytes, seconds) the child may use for an input of ``n_bytes``."""
    return BASE_MEMORY + MEMORY_PER_INPUT_BYTE * n_bytes, BASE_SECONDS + SECONDS_PER_MB * n_bytes / 1e6


def read_guarded(kind: str, data: bytes, name: str) -> tuple[bytes | None, str | None]:
    """(bytecode, None) where the child read ``data``; (None, one-line message) where it did not."""
    memory, seconds = limits(len(data))
    cmd = [sys.executable, "-c", _BOOT, str(_READER), kind, name, str(memory)]
    try:
        proc = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=seconds, env=_child_env())
    except subprocess.TimeoutExpired:
        return None, (f"{name}: the MLIR reader ran past {seconds:.0f} s on this input and was stopped "
                      "(a hostile or broken file?)")
    except OSError as e:
        return None, f"{name}: cannot start the MLIR reader process: {e.strerror or e}"
    out = proc.stdout
    if proc.returncode == 0 and out[:1] == b"K":
        return out[1:], None
    if proc.returncode == 0 and out[:1] == b"E":
        return None, out[1:].decode("utf-8", "replace")
    return None, f"{name}: {_crash(proc.returncode, proc.stderr, memory)}"


def _crash(code: int, stderr: bytes, memory: int) -> str:
    if code < 0:
        try:
            what = signal.Signals(-code).name
        except ValueError:
            what = f"signal {-code}"
    else:
        what = f"exit {code}"
    text = stderr.decode("utf-8", "replace")
    if "MemoryError" in text or "bad_alloc" in text or "unable to grow" in text:
        return (f"the MLIR reader ran out of memory on this input (limit {memory >> 20} MiB): "
                "truncated, corrupt or hostile data")
    return f"the MLIR reader crashed on this input ({what}): truncated, corrupt or hostile data"


def _child_env() -> dict:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    return env

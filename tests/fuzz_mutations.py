"""Seed programs and mutations for the fuzz suite (tests/test_fuzz.py) and benchmarks/fuzz_campaign.py.

Seeds are small valid programs (text), each also as MLIR bytecode and gzipped; mutations are what a
damaged or hostile file looks like: truncated, a byte flipped, a line deleted, a dimension made odd.
"""
from __future__ import annotations

import gzip
import io
import random
import re
from pathlib import Path

FIX = Path(__file__).parent / "fixtures"
SEED_FILES = (
    "small_stablehlo.mlir", "small_mhlo_pretty.mlir", "small_mhlo_generic.mlir", "dot_mhlo_generic.mlir",
    "collectives_8dev.mlir", "reliability/cumulative_logsumexp.mlir", "reliability/scf_for.mlir",
    "reliability/chlo_scan.mlir", "reliability/case_comm.mlir", "reliability/while_i8.mlir",
    "reliability/new_rules.mlir", "reliability/all_gather_replica_and_partition.mlir",
)
#: Dimensions that break assumptions: zero, one, a prime, past 32 bits, the int64 limit.
ODD_DIMS = ("0", "1", "7", "2147483648", "4294967297", "9223372036854775807")
_DIM = re.compile(rb"(?<=[<x])\d+(?=x)")


def seeds() -> list[tuple[str, bytes]]:
    """(name, bytes) of every seed: text, bytecode and gzipped text."""
    out = []
    for name in SEED_FILES:
        text = (FIX / name).read_bytes()
        out.append((name, text))
        out.append((name + ".gz", gzip.compress(text, mtime=0)))
        bc = _bytecode(text)
        if bc is not None:
            out.append((name + "bc", bc))
    return out


def _bytecode(text: bytes) -> bytes | None:
    from jaxlib.mlir import ir

    from mhlo_cost.ir.loader import make_context

    ctx = make_context()
    try:
        with ctx:
            module = ir.Module.parse(text)
    except ir.MLIRError:
        return None
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    return buf.getvalue()


def mutate(data: bytes, kind: str, rng: random.Random) -> bytes:
    """One mutation of ``data``: ``truncate``, ``flip``, ``delete_line``, ``odd_dim`` or ``splice``."""
    if not data:
        return data
    if kind == "truncate":
        return data[: rng.randrange(len(data))]
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 4))):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == "delete_line":
        lines = data.split(b"\n")
        del lines[rng.randrange(len(lines))]
        return b"\n".join(lines)
    if kind == "odd_dim":
        spots = list(_DIM.finditer(data))
        if not spots:
            return mutate(data, "flip", rng)
        m = rng.choice(spots)
        return data[: m.start()] + rng.choice(ODD_DIMS).encode() + data[m.end():]
    if kind == "splice":  # a piece of the file repeated elsewhere
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        k = rng.randrange(len(data))
        return data[:k] + data[i:j] + data[k:]
    raise ValueError(kind)


KINDS = ("truncate", "flip", "delete_line", "odd_dim", "splice")


def suffix(name: str) -> str:
    return ".mlir.gz" if name.endswith(".gz") else (".mlirbc" if name.endswith("bc") else ".mlir")


def stderr_ok(code: int, err: str) -> str | None:
    """None where (exit code, stderr) keep the promise; otherwise what is wrong."""
    if code not in (0, 1, 2):
        return f"exit {code}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("mhlo-cost: error: ")]
    others = [ln for ln in lines if not ln.startswith(("mhlo-cost: error: ", "mhlo-cost: warning: "))]
    if others:
        return f"unexpected stderr: {others[0][:200]}"
    if code == 2 and len(errors) != 1:
        return f"exit 2 with {len(errors)} error lines"
    if code != 2 and errors:
        return f"exit {code} with an error line"
    return None

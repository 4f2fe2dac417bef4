"""Location strings for the fuzz suite (issue 24): names and file names with MLIR hex escapes, inside
name, file, ``fused[...]`` and ``callsite(...)`` locations, and bytecode whose location strings have a byte
flipped. Used by tests/test_input_files.py and benchmarks/fuzz_locations.py.

A string that is not UTF-8 made jaxlib abort the process (SIGABRT) when the walk read it.
"""
from __future__ import annotations

import gzip
import io
import random

#: Pieces of a name stack, as JAX writes them.
SEGMENTS = ("jit(f)", "blocks_3", "attn", "transpose(jvp(mlp))", "dot_general", "add", "layers.0", "x")
#: What goes into a string: a byte past ASCII alone (never UTF-8), a valid UTF-8 sequence written as escapes,
#: a cut-off sequence, an overlong form, control bytes, an escaped quote and backslash, raw UTF-8 characters.
ESCAPES = ("\\E9", "\\FF", "\\80", "\\C0\\AF", "\\C3\\A9", "\\E2\\82", "\\E2\\82\\AC", "\\ED\\A0\\80", "\\F8",
           "\\00", "\\0A", "\\22", "\\5C", "é", "日本")


def name(rng: random.Random) -> str:
    """A string literal's body: a name stack with one to three escapes or characters in it."""
    pieces = list("/".join(rng.choice(SEGMENTS) for _ in range(rng.randint(1, 4))))
    for _ in range(rng.randint(1, 3)):  # between characters, never inside an escape
        pieces.insert(rng.randrange(len(pieces) + 1), rng.choice(ESCAPES))
    return "".join(pieces)


def location(rng: random.Random, depth: int = 0) -> str:
    """A location: name, name with a child, file:line:col, fused (with or without metadata), callsite, unknown."""
    kinds = ["name", "file", "unknown"] + (["named_child", "fused", "fused_meta", "callsite"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "name":
        return f'"{name(rng)}"'
    if kind == "file":
        return f'"{name(rng)}.py":{rng.randint(1, 999)}:{rng.randint(1, 80)}'
    if kind == "unknown":
        return "unknown"
    if kind == "named_child":
        return f'"{name(rng)}"({location(rng, depth + 1)})'
    if kind == "callsite":
        return f"callsite({location(rng, depth + 1)} at {location(rng, depth + 1)})"
    parts = ", ".join(location(rng, depth + 1) for _ in range(rng.randint(1, 3)))
    meta = f'<"{name(rng)}">' if kind == "fused_meta" else ""
    return f"fused{meta}[{parts}]"


def program(rng: random.Random, loc=None) -> str:
    """A small program (elementwise ops, a dot, a call, a reduce) with a location on every op and argument;
    ``loc(rng)`` writes each (default :func:`location`)."""
    loc = loc or location
    t, w = "tensor<4x8xf32>", "tensor<8x4xf32>"
    L = lambda: f"loc({loc(rng)})"  # noqa: E731
    lines = [f"func.func private @g(%x: {t} {L()}) -> {t} {{",
             f"  %0 = stablehlo.exponential %x : {t} {L()}",
             f"  return %0 : {t} {L()}",
             f"}} {L()}",
             f"func.func @main(%a: {t} {L()}, %b: {w} {L()}) -> tensor<4x4xf32> {{",
             f"  %0 = stablehlo.add %a, %a : {t} {L()}",
             f"  %1 = func.call @g(%0) : ({t}) -> {t} {L()}",
             f"  %2 = stablehlo.tanh %1 : {t} {L()}",
             f"  %3 = stablehlo.dot_general %2, %b, contracting_dims = [1] x [0] : ({t}, {w}) -> tensor<4x4xf32> {L()}",
             f"  return %3 : tensor<4x4xf32> {L()}",
             f"}} {L()}", ""]
    return "\n".join(lines)


def bytecode(text: str) -> bytes | None:
    """MLIR bytecode of ``text`` as MLIR writes it (its strings as they are), or None where it does not parse."""
    from jaxlib.mlir import ir

    from mhlo_cost.ir.loader import make_context

    try:
        with make_context():
            module = ir.Module.parse(text)
    except ir.MLIRError:
        return None
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)  # writes the strings' bytes; never makes a Python str of them
    return buf.getvalue()


def marked_program(rng: random.Random) -> tuple[str, list[bytes]]:
    """A program whose location strings are ASCII markers (``mk0007/attn``), and the markers."""
    marks: list[bytes] = []

    def loc(r):
        m = f"mk{len(marks):04d}/{r.choice(SEGMENTS[1:3])}"
        marks.append(m.encode())
        return f'"{m}"' if r.random() < 0.7 else f'"{m}.py":{r.randint(1, 99)}:1'
    return program(rng, loc), marks


def flipped_bytecode(rng: random.Random) -> bytes:
    """Bytecode of a marked program with one byte of one location string made a byte past ASCII (a bit flip
    of bit 7, or any high byte): a string that is not UTF-8 where the reader expects a name."""
    text, marks = marked_program(rng)
    data = bytearray(bytecode(text))
    mark = rng.choice(marks)
    at = data.find(mark)
    i = at + rng.randrange(len(mark))
    data[i] = data[i] ^ 0x80 if rng.random() < 0.5 else rng.randrange(0x80, 0x100)
    return bytes(data)


KINDS = ("text", "text_gz", "bytecode", "bytecode_flip")


def mutant(rng: random.Random, kind: str) -> tuple[str, bytes]:
    """(file suffix, bytes) of one input of ``kind``."""
    if kind == "bytecode_flip":
        return ".mlirbc", flipped_bytecode(rng)
    text = program(rng)
    if kind == "bytecode":
        bc = bytecode(text)
        if bc is not None:
            return ".mlirbc", bc
    if kind == "text_gz":
        return ".mlir.gz", gzip.compress(text.encode(), mtime=0)
    return ".mlir", text.encode()

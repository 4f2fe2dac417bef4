"""The guarded child's loop (:mod:`mhlo_cost.ir.guard` starts it): parse each request with
:mod:`mhlo_cost.ir.reader` and answer with MLIR bytecode, or, for a walk request, walk the module here
(:mod:`mhlo_cost.analysis.isolated`) and hand back the analysis: the input is parsed once.

Protocol: requests on stdin, one JSON header line ``[kind, name, extra_memory, size, walk options or null,
cpu_seconds]`` and the bytes (the request may use ``extra_memory`` more bytes of address space and
``cpu_seconds`` more of CPU time: :func:`mhlo_cost.ir.reader.limit_cpu`); each answer on stdout as 8 bytes of
length (big-endian) and the answer: a code of :class:`mhlo_cost.ir.codes.Answer` and its payload (``BYTECODE``
and bytecode, ``READ_ERROR`` and a UTF-8 message, ``OUT_OF_MEMORY`` and a message: restart the child; or the
walk's answer).

Run as a file (``argv[1]``: the folder that holds the package, so the caller's own copy is the one imported;
``walk`` after it: import the walk at once). At the top of the house: it imports the reader, the walk and the
one composition (:mod:`mhlo_cost.studies.compose`), which it hands to the walk for a whole answer.
"""
from __future__ import annotations

import json
import sys


def answer(kind: str, data: bytes, name: str, walk: str | None) -> bytes:
    """The answer to one request (see the module docstring); ``walk``: the walk's options as JSON."""
    from mhlo_cost.ir.codes import Answer
    from mhlo_cost.ir.reader import bytecode, parsed

    if walk is not None:
        from mhlo_cost.walk.split import enable

        enable()  # one thread here: a large entry function is walked by two processes where a core is idle meanwhile
    module, op = parsed(kind, data, name)
    if module is None:
        return op  # the error answer
    if walk is None:
        return Answer.BYTECODE + bytecode(op)
    if op != module.operation:  # the one module nested in the file: a module of its own
        from jaxlib.mlir import ir

        with module.context:
            module = ir.Module.parse(bytecode(op))
    from mhlo_cost.analysis.isolated import answer as walk_answer

    try:
        code, payload = walk_answer(module, name, walk, _answer_whole)
    except MemoryError:
        return Answer.OUT_OF_MEMORY + f"{name}: the walk ran out of memory on this input: too large or hostile".encode()
    return bytes(code + payload)


def _answer_whole(analysis, asked: str):
    """:func:`mhlo_cost.studies.compose.answer_in_child` (the one composition), imported only when a request asks
    for a whole answer."""
    from mhlo_cost.studies.compose import answer_in_child

    return answer_in_child(analysis, asked)


def _answerable(analysis) -> bool:
    """:func:`mhlo_cost.studies.compose.answerable`: whether :func:`_answer_whole` may answer (asked before the
    child forks to compute for the answer: :mod:`mhlo_cost.analysis.isolated`)."""
    from mhlo_cost.studies.compose import answerable

    return answerable(analysis)


_answer_whole.answerable = _answerable


def serve(walk: bool = False) -> None:
    """Answer requests until stdin closes; ``walk``: import the walk before the first request."""
    from jaxlib.mlir._mlir_libs import _mlir

    # No dialect package is looked for when an op is first met: the walk reads ops by name, never through
    # the dialects' generated op classes, and this process runs nothing else (importing them cost 10-15 ms).
    _mlir.globals.dialect_search_modules = []
    # jaxlib's ir imports numpy where it can, for attribute builders the walk never uses; a one-file report's
    # answer needs none either (the memory sweep takes its list paths: mhlo_cost.memory.sweep.arrays), so it is
    # held back here, about 50 ms of the child's start. A view that needs numpy (pandas) imports it as usual.
    held = "numpy" not in sys.modules  # (where a site hook imported it already, it stays as it is)
    if held:
        sys.modules["numpy"] = None
    try:
        from jaxlib.mlir import ir  # noqa: F401
    finally:
        if held:
            del sys.modules["numpy"]
    from mhlo_cost.ir.reader import limit_cpu, limit_memory

    if walk:
        import mhlo_cost.analysis  # noqa: F401
        import mhlo_cost.walk.base  # noqa: F401 (the walk, every rule table)
        import mhlo_cost.analysis.isolated  # noqa: F401
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = inp.readline()
        if not header:
            return
        kind, name, extra, size, walk, seconds = json.loads(header)
        data = inp.read(size)
        limit_memory(extra)
        limit_cpu(seconds)
        reply = answer(kind, data, name, walk)
        out.write(len(reply).to_bytes(8, "big") + reply)
        out.flush()


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])  # the caller's own copy of the package first
    serve(walk="walk" in sys.argv[2:])

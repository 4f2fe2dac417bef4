"""Call graphs that fan out, for tests/test_callgraph_fanout.py and benchmarks/callgraph_fanout.py.

``fanout(depth, fan)``: ``@main`` calls ``@f0``; each ``@fi`` calls ``@f(i+1)`` ``fan`` times in a chain
(each call reads the previous call's result); the leaf ``@f<depth>`` computes ``add(exp(dot(y, y)), y)`` on a
4x4 f32. The leaf runs ``fan ** depth`` times: one per call path. ``scopes``: ``"same"`` (no names: every call
site has the same scope), ``"distinct"`` (each call site its own scope ``s<i>_<j>``), or ``"blocks"``
(``@main`` calls the leaf ``fan`` times from scopes ``blocks.<j>``, as a model calls its block function).
``inline(n)``: the leaf's ops written out ``n`` times in one function, without calls.
"""
from __future__ import annotations

T = "tensor<4x4xf32>"
#: Per leaf execution: dot 2*4*4*4; exponential 16 elements (1 FLOP and 1 transcendental each); add 16.
LEAF = {"gemm_flops": 128, "vector_flops": 32, "transcendentals": 16, "ops": 3}
#: One 4x4 f32 value.
VALUE_BYTES = 64


def _leaf_body(y: str, tag: str) -> list[str]:
    return [f"    %d{tag} = stablehlo.dot {y}, {y} : ({T}, {T}) -> {T}",
            f"    %e{tag} = stablehlo.exponential %d{tag} : {T}",
            f"    %r{tag} = stablehlo.add %e{tag}, {y} : {T}"]


def fanout(depth: int, fan: int = 2, scopes: str = "same") -> str:
    lines = ["module {", f"  func.func @main(%a: {T}) -> {T} {{",
             f"    %r = func.call @f0(%a) : ({T}) -> {T}", f"    return %r : {T}", "  }"]
    for i in range(depth):
        lines.append(f"  func.func private @f{i}(%x: {T}) -> {T} {{")
        prev = "%x"
        for j in range(fan):
            loc = f' loc("s{i}_{j}/call")' if scopes == "distinct" else ""
            lines.append(f"    %c{j} = func.call @f{i + 1}({prev}) : ({T}) -> {T}{loc}")
            prev = f"%c{j}"
        lines += [f"    return {prev} : {T}", "  }"]
    lines.append(f"  func.func private @f{depth}(%y: {T}) -> {T} {{")
    lines += _leaf_body("%y", "") + [f"    return %r : {T}", "  }", "}"]
    return "\n".join(lines) + "\n"


def blocks(n: int) -> str:
    """``@main`` calls ``@block`` (the leaf) ``n`` times from scopes ``blocks.0`` ... ``blocks.<n-1>``."""
    lines = ["module {", f"  func.func @main(%a: {T}) -> {T} {{"]
    prev = "%a"
    for j in range(n):
        lines.append(f'    %c{j} = func.call @block({prev}) : ({T}) -> {T} loc("blocks.{j}/call")')
        prev = f"%c{j}"
    lines += [f"    return {prev} : {T}", "  }", f"  func.func private @block(%y: {T}) -> {T} {{"]
    lines += _leaf_body("%y", "") + [f"    return %r : {T}", "  }", "}"]
    return "\n".join(lines) + "\n"


def inline(n: int) -> str:
    """The leaf's ops ``n`` times in a chain, in ``@main``, without calls."""
    lines = ["module {", f"  func.func @main(%a: {T}) -> {T} {{"]
    prev = "%a"
    for j in range(n):
        lines += _leaf_body(prev, f"_{j}")
        prev = f"%r_{j}"
    lines += [f"    return {prev} : {T}", "  }", "}"]
    return "\n".join(lines) + "\n"


def random_dag(seed: int) -> tuple[str, int]:
    """A random call DAG (text) and how many times the leaf body runs in it, by a closed form over the graph.

    Functions ``@g0`` (the entry) ... ``@g<n-1>``; each runs the leaf body once on its input, then calls
    functions after it, some several times, from a scope that is shared, its own, or none; the body runs
    once per call path, so ``runs(g) = sum over call sites in f of runs(f)`` with ``runs(g0) = 1``."""
    import random

    rng = random.Random(seed)
    n = rng.randint(2, 12)
    calls = {i: [] for i in range(n)}
    for i in range(n - 1):
        for _ in range(rng.randint(1, 4)):
            j = rng.randint(i + 1, n - 1)
            scope = rng.choice(["", "shared", f"s{i}_{len(calls[i])}"])
            calls[i] += [(j, scope)] * rng.randint(1, 3)
    runs = [0] * n
    runs[0] = 1
    for i in range(n):
        for j, _ in calls[i]:
            runs[j] += runs[i]
    lines = ["module {"]
    for i in range(n):
        private = "" if i == 0 else " private"
        lines.append(f"  func.func{private} @g{i}(%y: {T}) -> {T} {{")
        lines += _leaf_body("%y", "")
        prev = "%r"
        for c, (j, scope) in enumerate(calls[i]):
            loc = f' loc("{scope}/call")' if scope else ""
            lines.append(f"    %c{c} = func.call @g{j}({prev}) : ({T}) -> {T}{loc}")
            prev = f"%c{c}"
        lines += [f"    return {prev} : {T}", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", sum(runs)

"""What the whole-process speed-ups of ``report`` keep: call stacks memoised per subtree (shared frames, the same
values), scopes memoised per name prefix, the wire's numbering of the frames' row lists, the request written
from a thread while the caller works (mhlo_cost/walk/locations.py, wire.py, guard.py)."""
from __future__ import annotations

import pytest

from mhlo_cost.ir import guard
from mhlo_cost.analysis import analyze
from mhlo_cost.ir.loader import load
from mhlo_cost.walk.locations import scope_of
from mhlo_cost.analysis.wire import decode, encode
from mhlo_cost.analysis.isolated import WalkOptions, analyze_isolated

# Two ops called from one Python line (a.py:10 calling f) and written at b.py:20 / b.py:21 inside f.
CALLS = """
#caller = loc("a.py":10:4)
#inner1 = loc("f"("b.py":20:8))
#inner2 = loc("f"("b.py":21:8))
#outer = loc("main"(#caller))
func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4x4xf32> loc(#op1)
  %1 = stablehlo.multiply %0, %a : tensor<4x4xf32> loc(#op2)
  return %1 : tensor<4x4xf32>
}
#op1 = loc("jit(g)/layers.0/attn/add"(callsite(#inner1 at #outer)))
#op2 = loc("jit(g)/layers.0/attn/mul"(callsite(#inner2 at #outer)))
"""


def test_call_stacks_are_the_frames_written_and_share_the_callers_frame():
    rows = analyze(load(CALLS, isolate=False)).rows
    add, mul = (r for r in rows if r.op in ("stablehlo.add", "stablehlo.multiply"))
    assert add.loc.stack == (("main", "a.py", 10, 4), ("f", "b.py", 20, 8))
    assert mul.loc.stack == (("main", "a.py", 10, 4), ("f", "b.py", 21, 8))
    assert add.loc.stack[0] is mul.loc.stack[0]  # the caller's frame read once
    assert (add.loc.file_line, mul.loc.file_line) == ("b.py:20", "b.py:21")
    assert add.loc.scope == mul.loc.scope == "layers.0/attn"


@pytest.mark.parametrize("name, scope", [("jit(g)/layers.0/attn/add", "layers.0/attn"),
                                         ("jit(g)/layers.0/attn/mul", "layers.0/attn"),
                                         ("transpose(jvp(layers.1))/jvp(layers.1)/mlp/dot", "layers.1/mlp"),
                                         ("add", ""), ("/add", "")])
def test_scope_depends_on_the_segments_before_the_primitive(name, scope):
    assert scope_of(name) == scope


def test_the_wire_keeps_each_frames_rows_and_their_identity():
    a = analyze(load(CALLS, isolate=False))
    b = decode(encode(a))
    assert [(r.op, r.scope, r.loc.stack, r.loc.file_line) for r in b.rows] == \
           [(r.op, r.scope, r.loc.stack, r.loc.file_line) for r in a.rows]
    if a.liveness is not None and a.liveness.entry is not None:
        fa, fb = a.liveness.entry, b.liveness.entry
        where = {id(r): i for i, r in enumerate(a.rows)}
        got = {id(r): i for i, r in enumerate(b.rows)}
        assert [where.get(id(r)) for r in fa.rows] == [got.get(id(r)) for r in fb.rows]
        assert (fa.rows is a.rows) == (fb.rows is b.rows)


def test_a_large_request_written_while_the_caller_works_gives_the_same_answer():
    if not guard.enabled():
        pytest.skip("the reader runs in process here")
    text = CALLS + "\n".join(f"// padding {i:06d} " + "x" * 100 for i in range(2000))  # past the pipe's 64 KiB
    calls = []
    plain = analyze_isolated(text, WalkOptions())
    meanwhile = analyze_isolated(text, WalkOptions(), meanwhile=lambda: calls.append(1))
    assert calls == [1]
    assert [(r.op, r.scope, r.gemm_flops, r.vector_flops, r.bytes_read) for r in meanwhile.rows] == \
           [(r.op, r.scope, r.gemm_flops, r.vector_flops, r.bytes_read) for r in plain.rows]


def test_an_interrupt_while_the_child_works_stops_it_and_the_next_request_is_answered():
    if not guard.enabled():
        pytest.skip("the reader runs in process here")

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        analyze_isolated(CALLS, WalkOptions(), meanwhile=interrupted)
    rows = analyze_isolated(OTHER, WalkOptions()).rows  # a new child: not the answer to the interrupted one
    assert [r.op for r in rows if r.op.startswith("stablehlo.")] == ["stablehlo.subtract"]


OTHER = """
func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.subtract %a, %a : tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}
"""

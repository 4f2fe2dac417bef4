"""Chip-independent pricing made once per program (mhlo_cost.roofline.program, issue 41): the attentions, the fused
grouping with each kernel's inputs and outputs, the schedule's graph and the fused memory profile are computed once
and reused on every chip, and every figure equals the one priced with nothing shared (a fresh walk per chip)."""
from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.analysis.wire import decode, encode
from mhlo_cost.network import resolve_profile
from mhlo_cost.roofline import Roofline
from mhlo_cost.roofline.memory import fused_profile
from mhlo_cost.roofline.program import MEMO, ProgramPricing

CHIPS = ("dgx-a100", "dgx-h100", "h100", "a100")


def _attention_with_psum() -> str:
    """Each device: attention (q k^T -> softmax -> p v) on its heads, then a psum of the output beside a matmul."""
    mesh = jax.sharding.AbstractMesh((8,), ("d",))

    def body(q, k, v, w):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        o = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        return jax.lax.psum(o, "d") * 2.0, w @ w

    f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(), P()), out_specs=(P(), P()), check_vma=False)
    x = jax.ShapeDtypeStruct((2, 4, 256, 64), jnp.bfloat16)
    return jax.jit(f).lower(x, x, x, jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)).as_text(debug_info=True)


@pytest.fixture(scope="module")
def program() -> str:
    return _attention_with_psum()


def _figures(rf: Roofline) -> tuple:
    """Everything a sweep row and a report read of an estimate, exactly (floats compared bit for bit)."""
    f = rf.fusion
    kernels = [(k.members, k.multiplicity, k.bytes_read, k.bytes_written, k.compute_s, k.memory_s, k.overhead_s,
                k.flops, k.peak, k.attention, [t.pretty for t in k.inputs], [t.pretty for t in k.outputs])
               for k in f.kernels]
    return (rf.summary(30), rf.program_bound(), kernels, list(f.row_kernel), list(f.row_time),
            rf.exposure().exposed, rf.exposure(fused=True).exposed, rf.kernel_frame().to_csv())


def test_shared_pricing_equals_pricing_each_chip_alone(program):
    shared = analyze(program, AnalysisOptions(dataflow=True))
    assert any(r.kind == "collective" for r in shared.rows) and sum(r.kind == "dot" for r in shared.rows) >= 3
    for name in CHIPS:
        hw = resolve_profile(name)
        alone = analyze(program, AnalysisOptions(dataflow=True))  # its own walk: nothing to share
        got, want = Roofline(shared, hw, "elementwise"), Roofline(alone, hw, "elementwise")
        assert _figures(got) == _figures(want), name
        assert fused_profile(shared, got.fusion).peak_bytes == fused_profile(alone, want.fusion).peak_bytes
    assert any(k.attention for k in got.fusion.kernels)  # the attention was found, and fused
    pricing = shared.__dict__[MEMO]
    # one grouping and one memory profile for the four chips (the dgx systems and the chips group alike)
    assert len(pricing._groupings) == 1 and len(pricing._memory) == 1 and pricing._graph is not None


def test_a_chip_reads_the_grouping_another_made(program):
    a = analyze(program, AnalysisOptions(dataflow=True))
    first = Roofline(a, resolve_profile("dgx-a100"), "elementwise")
    pricing = ProgramPricing.of(a)
    grouping = next(iter(pricing._groupings.values()))
    second = Roofline(a, resolve_profile("dgx-h100"), "elementwise")
    assert ProgramPricing.of(a) is pricing and next(iter(pricing._groupings.values())) is grouping
    assert [k.members for k in first.fusion.kernels] == [k.members for k in second.fusion.kernels]
    # each chip its own kernels (times filled per chip), never the other's objects
    assert all(x is not y for x, y in zip(first.fusion.kernels, second.fusion.kernels))
    assert first.fusion.kernels[0].time_s != second.fusion.kernels[0].time_s


def test_another_row_list_gets_its_own_pricing(program):
    a = analyze(program, AnalysisOptions(dataflow=True))
    Roofline(a, resolve_profile("h100"), "elementwise")
    part = replace(a, rows=list(a.rows))  # (a filtered view copies the analysis with other rows, memo and all)
    assert ProgramPricing.of(part) is not ProgramPricing.of(a)
    assert ProgramPricing.of(part).matches(part) and not ProgramPricing.of(a).matches(part)


def test_the_wire_drops_the_pricing(program):
    a = analyze(program, AnalysisOptions(dataflow=True))
    Roofline(a, resolve_profile("h100"), "elementwise")
    assert MEMO in a.__dict__ and MEMO not in decode(encode(a)).__dict__


def test_the_fused_memory_of_another_program_is_refused(program):
    a = analyze(program, AnalysisOptions(dataflow=True))
    b = analyze(program, AnalysisOptions(dataflow=True))
    rf = Roofline(a, resolve_profile("h100"), "elementwise")
    with pytest.raises(ValueError, match="another program"):
        ProgramPricing.of(a).fused_memory(b, rf.fusion.row_kernel)


def test_without_collectives_nothing_is_exposed_and_the_stream_never_waits():
    from mhlo_cost.network import exposed_comm

    compute = [0.1, 0.2, 0.3, 0.7]
    e = exposed_comm([("a",), (0,), (None,), (1, 2)], compute, [0.0] * 4, [False] * 4)
    assert e.exposed == [0.0] * 4 and e.makespan == ((0.1 + 0.2) + 0.3) + 0.7


def test_totals_are_a_fresh_dict_each_call(program):
    rf = Roofline(analyze(program, AnalysisOptions(dataflow=True)), resolve_profile("h100"), "elementwise")
    first = rf.totals()
    first["est_time_s"] = -1.0
    assert rf.totals()["est_time_s"] > 0 and rf.totals() == rf.totals()

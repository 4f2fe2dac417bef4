"""A boolean (i1, XLA's PRED) element is one byte, as XLA counts and stores it, everywhere bytes are counted.

The reference is XLA itself: the bytes its cost analysis says each program accesses and the argument and output
sizes of its buffer assignment (``memory_analysis``). Element counts are odd (1001, 7 x 13), so that one bit an
element packed eight to a byte (ceil(n / 8)) could not come out equal by chance.
"""
import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import analyze

S, B, F32 = jax.ShapeDtypeStruct, jnp.bool_, jnp.float32


def _bool_chain(x, y):  # and, xor, not: every operand and result a pred
    return jnp.logical_not(jnp.logical_xor(jnp.logical_and(x, y), x))


def _select(p, a, b):  # a pred operand beside f32 ones
    return jnp.where(p, a, b)


PROGRAMS = {
    "bool chain": (_bool_chain, (S((1001,), B), S((1001,), B))),
    "select on a pred": (_select, (S((7, 13), B), S((7, 13), F32), S((7, 13), F32))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_pred_bytes_equal_xla(name):
    f, shapes = PROGRAMS[name]
    lowered = jax.jit(f).lower(*shapes)
    s = analyze(lowered.as_text()).summary
    assert s["bytes_read"] + s["bytes_written"] == int(lowered.cost_analysis()["bytes accessed"])
    ma = lowered.compile().memory_analysis()  # one output: no table of output addresses
    assert s["argument_bytes"] == ma.argument_size_in_bytes
    assert s["output_bytes"] == ma.output_size_in_bytes


def test_bool_chain_counts_one_byte_an_element():
    f, shapes = PROGRAMS["bool chain"]
    s = analyze(jax.jit(f).lower(*shapes).as_text()).summary
    n = 1001
    # three ops (and, xor, not): two, two and one pred operands read, one pred result each written
    assert (s["bytes_read"], s["bytes_written"]) == (5 * n, 3 * n)
    assert s["argument_bytes"] == 2 * n and s["output_bytes"] == n


def test_pred_result_of_a_compare_is_one_byte_an_element():
    lowered = jax.jit(lambda x: x > 0).lower(S((7, 13), F32))
    rows = analyze(lowered.as_text()).rows
    compare = next(r for r in rows if r.op.endswith("compare"))
    assert compare.result.dtype == "i1"
    assert compare.result.nbytes == 7 * 13
    assert compare.result.nbytes == lowered.compile().memory_analysis().output_size_in_bytes

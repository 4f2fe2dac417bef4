"""The array pass of a flat frame (memory/flat.py): the same live bytes as the per-item pass it stands in for,
and exact Python integers beyond int64 (where it hands over to that pass)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from mhlo_cost import analyze
from mhlo_cost.memory import flat
from mhlo_cost.memory.profile import profile

S = jax.ShapeDtypeStruct
F32 = jnp.float32


def _mlp(x, w1, w2):
    h = jnp.tanh(x @ w1).reshape(-1)  # a re-labelling
    return (h.reshape(x.shape[0], -1) @ w2).sum(0), jnp.exp(x)


def _sorted_pair(a, b):
    return lax.sort((a, b), num_keys=1)  # one row making two values


def _donated(x, y):
    return jnp.sin(x) * y


CASES = [
    (_mlp, (S((8, 16), F32), S((16, 32), F32), S((32, 4), F32)), {}),
    (_sorted_pair, (S((64,), F32), S((64,), jnp.int32)), {}),
    (_donated, (S((128,), F32), S((128,), F32)), {"donate_argnums": (0,)}),
]


def _profiles(monkeypatch, f, shapes, jit):
    a = analyze(jax.jit(f, **jit).lower(*shapes).as_text(debug_info=True))
    used = []
    real = flat.backward
    monkeypatch.setattr(flat, "backward", lambda sw, ps: used.append(real(sw, ps)) or used[-1])
    fast = profile(a)
    monkeypatch.setattr(flat, "applies", lambda ps: False)
    slow = profile(a)
    return fast, slow, used


@pytest.mark.parametrize("f,shapes,jit", CASES, ids=[c[0].__name__ for c in CASES])
def test_same_as_per_item_pass(monkeypatch, f, shapes, jit):
    fast, slow, used = _profiles(monkeypatch, f, shapes, jit)
    assert used == [True]  # the array pass ran (a flat entry)
    assert fast.during == slow.during and fast.after == slow.after
    assert (fast.peak_bytes, fast.peak_row, fast.param_bytes, fast.output_bytes) == \
        (slow.peak_bytes, slow.peak_row, slow.param_bytes, slow.output_bytes)
    assert all(type(b) is int for b in fast.during + fast.after)


def test_beyond_int64_is_exact(monkeypatch):
    # exp of an f32 array of 2**61 elements: 2**63 bytes each, over int64. The argument is live throughout;
    # while exp runs, the argument and its result: 2**64 bytes.
    n = 2**61
    mlir = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.exponential %x : tensor<{n}xf32>
  return %0 : tensor<{n}xf32>
}}"""
    a = analyze(mlir)
    used = []
    real = flat.backward
    monkeypatch.setattr(flat, "backward", lambda sw, ps: used.append(real(sw, ps)) or used[-1])
    m = profile(a)
    assert used == [False]  # handed to the per-item pass
    assert m.peak_bytes == 2 * 4 * n and type(m.peak_bytes) is int
    assert m.during == [2 * 4 * n] and m.output_bytes == 4 * n


def test_large_argument_sums_exact():
    # An argument of 2**63 bytes (live throughout) and a slice of 4 floats: the running sums pass int64.
    n = 2**61
    mlir = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<4xf32> {{
  %0 = stablehlo.slice %x [0:4] : (tensor<{n}xf32>) -> tensor<4xf32>
  %1 = stablehlo.exponential %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}}"""
    m = profile(analyze(mlir))
    assert m.during == [4 * n + 16, 4 * n + 32] and m.after == [4 * n + 16, 4 * n + 16]
    assert m.peak_bytes == 4 * n + 32 and type(m.peak_bytes) is int


def test_sizes_near_int64_stay_exact():
    """Three live values of 3 x 2**61 bytes each: their sum passes 2**63, where an int64 sum would wrap
    negative; the peak must be the exact Python integer (the argument, its double and the double of that)."""
    from mhlo_cost import analyze

    n = 3 * 2**61
    t = f"tensor<{n}xi8>"
    text = (f"func.func @main(%a: {t}) -> {t} {{\n  %0 = stablehlo.add %a, %a : {t}\n"
            f"  %1 = stablehlo.add %0, %0 : {t}\n  return %1 : {t}\n}}\n")
    mem = analyze(text).memory
    assert mem.peak_bytes == 3 * n
    assert min(mem.after) >= 0 and min(mem.during) >= 0

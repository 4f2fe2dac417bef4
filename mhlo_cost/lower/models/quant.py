"""Quantised linear layers in JAX, as the kernels of each precision recipe run them
(:mod:`mhlo_cost.machines.precision`).

A linear's parameters are stored at the recipe's width: ``w`` (in, out) in the weight dtype (int4 packed two
per ``uint8`` byte along ``in``: the even row in the low nibble), ``w_scale`` (and ``w_zero``, int4 packed two
per byte along ``out``) as separate arrays, ``b`` in the model's dtype. :func:`dense` runs

- **fp8 / int8 / fp4 matmuls** (tensorwise, rowwise): the activation's amax (a reduce), its scale, a divide
  and a cast to the low dtype; one ``dot_general`` on the low-precision operands with a float32 (int32)
  accumulator (``preferred_element_type``); the two scales multiplied in after; the cast back.
- **block-scaled matmuls** (``fp8-blockwise-128``, ``mxfp8``, ``nvfp4``): the contraction cut into blocks,
  one ``dot_general`` batched over the blocks (FLOPs 2 m n k, unchanged), each block's partial product
  multiplied by its two scales and the partials summed, as a block-scaled GEMM rescales per block of K.
- **weight-only** (``w4a16-awq``, ``w8a16``): the weight unpacked with shifts and ands, its zero subtracted,
  its scale multiplied (dequantised), then a matmul in the model's dtype.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...machines.precision import Recipe

F32 = jnp.float32
#: Largest finite magnitude of each element type, the target of a scale (amax / max).
QMAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float4_e2m1fn": 6.0, "int8": 127.0, "int4": 7.0}
TINY = 1e-12
#: The scope of a training linear's weight casts (its amax and its cast to fp8, forward and backward): what
#: Transformer Engine makes once per optimizer step and keeps for the later micro-batches
#: (:mod:`mhlo_cost.studies.plan.fp8_weights`).
WEIGHT_SCOPE = "fp8_weight"


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


def _check_blocks(i: int, o: int, recipe: Recipe) -> None:
    from ..frontends import FrontendError

    s = recipe.weight_scaling
    for size, what, n in ((s.block, "in", i), (s.block2, "out", o)):
        if size and n % size:
            raise FrontendError(f"--precision {recipe.name}: a linear's {what} features ({n}) are not a multiple "
                                f"of its block ({size})")
    if recipe.weight == "int4" and (i % 2 or (s.zero and o % 2)):
        raise FrontendError(f"--precision {recipe.name}: int4 packs two values per byte; a linear of {i}x{o} "
                            "has an odd dimension")


def linear_shapes(i: int, o: int, recipe: Recipe, model_dtype: str, bias: bool = True) -> dict:
    """The stored parameters of one (in ``i``, out ``o``) linear under ``recipe`` (``bias`` False: no ``b``, as
    Llama's linears have none)."""
    _check_blocks(i, o, recipe)
    b = {"b": _sds((o,), model_dtype)} if bias else {}
    if not recipe.quantised:
        return {"w": _sds((i, o), model_dtype)} | b
    s = recipe.weight_scaling
    scale_dt = s.scale_dtype or model_dtype
    if recipe.weight == "int4":
        w = _sds((i // 2, o), "uint8")
    else:
        w = _sds((i, o), recipe.weight)
    if s.scheme in ("tensor", "row"):
        scale = () if s.scheme == "tensor" else (o,)
    else:  # per block of K (and of N for a 2-D block)
        scale = (i // s.block, o // (s.block2 or 1))
    out = {"w": w, "w_scale": _sds(scale, scale_dt)} | b
    if s.zero:
        out["w_zero"] = _sds((i // s.block, o // 2), "uint8")
    if s.tensor_scale:
        out["w_scale2"] = _sds((), "float32")
    return out


def unpack_int4(q, axis: int):
    """``uint8`` holding two int4 values (low nibble first) -> ``uint8`` of twice the length along ``axis``."""
    lo = jnp.bitwise_and(q, jnp.uint8(15))
    hi = lax.shift_right_logical(q, jnp.uint8(4))
    both = jnp.stack([lo, hi], axis=axis + 1)
    shape = list(q.shape)
    shape[axis] *= 2
    return both.reshape(shape)


def _quantise(x, target: str, amax):
    """x / (amax / qmax) cast to ``target`` (rounded for integers); returns the values and the float32 scale."""
    scale = jnp.maximum(amax, TINY) / QMAX[target]
    y = x.astype(F32) / scale
    if target.startswith("int"):
        y = jnp.round(y)
    return y.astype(jnp.dtype(target)), scale


def _contract(xq, w, acc):
    return lax.dot_general(xq, w, (((xq.ndim - 1,), (0,)), ((), ())), preferred_element_type=acc)


def _scaled(p, x, recipe: Recipe):
    """Tensorwise or rowwise: one low-precision dot, the scales after."""
    target = recipe.activation
    per_row = recipe.activation_scaling.scheme == "row"
    amax = jnp.max(jnp.abs(x.astype(F32)), axis=-1, keepdims=True) if per_row else jnp.max(jnp.abs(x.astype(F32)))
    xq, xs = _quantise(x, target, amax)
    acc = jnp.int32 if recipe.accumulation == "int32" else F32
    y = _contract(xq, p["w"], acc).astype(F32)
    return y * xs * p["w_scale"].astype(F32)


def _block_scales(amax, recipe: Recipe):
    """Per-block activation scales in the recipe's scale dtype (MX: powers of two, e8m0), float32 to apply."""
    s = recipe.activation_scaling
    target = recipe.activation
    if s.scheme == "mx":  # shared exponent: 2^(floor(log2 amax) - emax of the element type), OCP MX sec. 6.3
        scale = jnp.exp2(jnp.floor(jnp.log2(jnp.maximum(amax, TINY))) - 8.0)
        return scale.astype(jnp.dtype(s.scale_dtype)).astype(F32)
    scale = jnp.maximum(amax, TINY) / QMAX[target]
    if s.scale_dtype != "float32":  # NVFP4: block scales stored in e4m3
        scale = scale.astype(jnp.dtype(s.scale_dtype)).astype(F32)
    return scale


def _blocked(p, x, recipe: Recipe):
    """Block-scaled along the contraction: one dot batched over the K blocks, each partial rescaled, summed."""
    s = recipe.activation_scaling
    blk, k = s.block, x.shape[-1]
    xb = x.astype(F32).reshape(*x.shape[:-1], k // blk, blk)
    if s.tensor_scale:  # NVFP4's second level: the tensor's own float32 scale
        t = jnp.maximum(jnp.max(jnp.abs(xb)), TINY) / (448.0 * QMAX[recipe.activation])
        xb = xb / t
    xs = _block_scales(jnp.max(jnp.abs(xb), axis=-1, keepdims=True), recipe)  # (..., kb, 1)
    xq = (xb / xs).astype(jnp.dtype(recipe.activation))
    w = p["w"].reshape(k // blk, blk, p["w"].shape[-1])
    lead = xq.ndim - 2
    part = lax.dot_general(xq, w, (((xq.ndim - 1,), (1,)), ((lead,), (0,))), preferred_element_type=F32)
    # part: (kb, ..., out); the activation's scale (..., kb, 1) -> (kb, ..., 1)
    part = part * jnp.moveaxis(xs, lead, 0)
    ws = p["w_scale"].astype(F32)  # (kb, out // block2) or (kb, out)
    if recipe.weight_scaling.block2:
        ws = jnp.repeat(ws, recipe.weight_scaling.block2, axis=1)
    part = part * ws.reshape(ws.shape[0], *([1] * (part.ndim - 2)), ws.shape[-1])
    y = jnp.sum(part, axis=0)
    if s.tensor_scale:
        y = y * t * p["w_scale2"]
    return y


def dequantise(p, recipe: Recipe, dtype):
    """A weight-only linear's weight in ``dtype``: unpacked, zero subtracted, scaled."""
    s = recipe.weight_scaling
    q = unpack_int4(p["w"], 0) if recipe.weight == "int4" else p["w"]
    if s.scheme == "row":
        return q.astype(dtype) * p["w_scale"].astype(dtype)
    i, o = q.shape
    g = q.reshape(i // s.block, s.block, o).astype(dtype)
    if s.zero:
        g = g - unpack_int4(p["w_zero"], 1).astype(dtype)[:, None, :]
    return (g * p["w_scale"].astype(dtype)[:, None, :]).reshape(i, o)


def _bias(p, y):
    return y + p["b"].astype(y.dtype) if "b" in p else y


def dense(p, x, recipe: Recipe | None = None):
    """x (..., in) @ w (in, out) + b under ``recipe`` (None or unquantised: one dot in x's dtype); a ``p`` without
    ``b`` adds none."""
    if recipe is None or not recipe.quantised:
        return _bias(p, lax.dot_general(x, p["w"], (((x.ndim - 1,), (0,)), ((), ()))))
    if recipe.weight_only:
        w = dequantise(p, recipe, x.dtype)
        return _bias(p, lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ()))))
    scheme = recipe.activation_scaling.scheme
    y = _scaled(p, x, recipe) if scheme in ("tensor", "row") else _blocked(p, x, recipe)
    return _bias(p, y.astype(x.dtype))


def kv_quantise(x, scale, dtype: str):
    """A new key or value entering an fp8 cache: divided by the layer's static scale, cast."""
    return (x.astype(F32) / scale).astype(jnp.dtype(dtype))


def _cast(t, axis, dtype: str):
    """``t`` scaled by its amax (over ``axis``, kept; None: the whole tensor) into ``dtype``, and that scale."""
    tf = t.astype(F32)
    amax = jnp.max(jnp.abs(tf)) if axis is None else jnp.max(jnp.abs(tf), axis=axis, keepdims=True)
    return _quantise(tf, dtype, amax)


def _fp8_kinds(recipe: Recipe) -> tuple[bool, str, str]:
    """(rowwise, the operands' fp8 type, the gradients') of an fp8 training recipe (torchao's: gradients in e5m2
    under tensorwise scaling, e4m3 under rowwise)."""
    row = recipe.activation_scaling.scheme == "row"
    return row, "float8_e4m3fn", ("float8_e4m3fn" if row else "float8_e5m2")


def _f32_dot(a, b, dims):
    return lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=F32)


def _fp8_forward(x, w, recipe: Recipe):
    row, e4, _ = _fp8_kinds(recipe)
    xq, xs = _cast(x, x.ndim - 1 if row else None, e4)
    with jax.named_scope(WEIGHT_SCOPE):
        wq, ws = _cast(w, 0 if row else None, e4)
    return (_f32_dot(xq, wq, ((x.ndim - 1,), (0,))) * xs * ws).astype(x.dtype)


def _fp8_backward(x, w, dy, recipe: Recipe, scales_first: bool):
    row, e4, grad = _fp8_kinds(recipe)
    last, lead = x.ndim - 1, tuple(range(x.ndim - 1))
    dq, ds = _cast(dy, last if row else None, grad)  # dgrad: dy (..., o) @ w^T, contracting o
    with jax.named_scope(WEIGHT_SCOPE):
        wq, ws = _cast(w, 1 if row else None, e4)
    dx = _f32_dot(dq, wq, ((last,), (1,))) * ds * (jnp.swapaxes(ws, 0, 1) if row else ws)
    xq, xs = _cast(x, lead if row else None, e4)  # wgrad: x^T @ dy, contracting the tokens
    gq, gs = _cast(dy, lead if row else None, grad)
    dw = _f32_dot(xq, gq, (lead, lead))
    if row and scales_first:
        dw = dw * (xs.reshape(-1, 1) * gs.reshape(1, -1))
    elif row:
        dw = dw * xs.reshape(-1, 1) * gs.reshape(1, -1)
    else:
        dw = dw * (xs * gs) if scales_first else dw * xs * gs
    return dx.astype(x.dtype), dw.astype(w.dtype)


def fp8_matmul(recipe: Recipe, *, bias: bool = False, scales_first: bool = False):
    """``mm(x (..., k), w (k, o)[, b (o,)]) -> (..., o)`` in x's dtype whose forward and both backward GEMMs run
    in fp8 with a float32 accumulator, as torchao's ``Float8Linear`` (a dense linear) and Transformer Engine's
    grouped GEMM (each expert's GEMM, under ``jax.vmap``) run them under an fp8 training recipe: each operand
    cast to e4m3 and scaled along its contraction (rowwise) or as a whole (tensorwise), the gradients in e5m2
    under tensorwise scaling and e4m3 under rowwise (torchao's recipes). The residuals kept for the backward are
    the bf16 input and weight (the fp8 casts are made again). ``bias``: ``b`` is added after the cast back (its
    gradient the sum of ``dy`` over the token axes). ``scales_first``: the wgrad's two scales are multiplied
    together before they scale the product (the grouped GEMM's order), else one after the other (the linear's);
    the two orders are kept so that each caller's program stays as it was lowered before they shared this."""
    if bias:
        @jax.custom_vjp
        def mm(x, w, b):
            return _fp8_forward(x, w, recipe) + b

        def fwd(x, w, b):
            return mm(x, w, b), (x, w)

        def bwd(res, dy):
            return (*_fp8_backward(*res, dy, recipe, scales_first), jnp.sum(dy, axis=tuple(range(dy.ndim - 1))))
    else:
        @jax.custom_vjp
        def mm(x, w):
            return _fp8_forward(x, w, recipe)

        def fwd(x, w):
            return mm(x, w), (x, w)

        def bwd(res, dy):
            return _fp8_backward(*res, dy, recipe, scales_first)

    mm.defvjp(fwd, bwd)
    return mm


def training_dense(recipe: Recipe):
    """``dense(x (b, n, k), w (k, o), b (o,))``: a linear whose three GEMMs run in fp8 (:func:`fp8_matmul`)."""
    return fp8_matmul(recipe, bias=True)

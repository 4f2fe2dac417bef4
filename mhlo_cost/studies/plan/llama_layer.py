"""What ONE device runs for one micro-batch of one Llama-family layer (``arch="llama"``), lowered to StableHLO from
shapes: the layer of :mod:`.layer` (the same split, stand-ins, attention, recompute policies, step and optimizer)
with the Llama block's own elementwise work.

* RMSNorm without bias, computed in fp32: torchtitan's ``RMSNorm`` (torchtitan 9dec370
  torchtitan/models/norms.py: ``x.float()``, ``pow(2).mean(-1)``, ``rsqrt(. + eps)``, the product cast back
  with ``type_as``, then times the weight), each torch op one line here, so that the eager model
  (:mod:`mhlo_cost.roofline.eager`: one kernel per call site) sees its calls; Transformer Engine's ``RMSNorm``
  (NeMo / Megatron-Core) is one fused kernel over the same arithmetic, as the compiled model fuses it.
* No bias on any linear (``wq``, ``wk``, ``wv``, ``wo``, ``w1``, ``w2``, ``w3``; Megatron-Core's Llama configs:
  ``add_bias_linear=False``). torchtitan's three q/k/v projections (its ``Attention``: ``wq``, ``wk``, ``wv``)
  where the step runs as PyTorch (``execution`` eager or inductor) or with the op policy; Megatron's one fused
  ``linear_qkv`` where it runs Megatron's fused kernels (``compiled``).
* Rotary embedding of q and k, as each framework runs it:
  torchtitan's ``apply_rotary_emb`` (model.py): ``xq.float()``, ``view_as_complex``, times the complex
  ``freqs_cis`` buffer (seq x d/2, complex64, precomputed once: an input of the program here, not a weight),
  ``view_as_real``, ``type_as``: three kernels per tensor in eager (the float copy, the complex product, the
  cast back); Inductor does not generate code for complex operators (torch/_inductor/lowering.py warns
  "Torchinductor does not support code generation for complex operators"), so under torch.compile the complex
  product (scope ``rope/complex``) is priced as eager runs it, one ATen kernel, and the casts around it are
  Inductor's (:func:`mhlo_cost.studies.plan.costs.analyse_layer`; profiled on the lent H200, torch 2.11, q and k of
  Llama 3 8B at seq 8192, forward + backward, benchmarks/data/measured_h200_rope.json: eager 624 us in 16
  kernels, compiled 495 us in 15, the ATen complex
  ``mul`` 189 / 191 us in both, the copies Triton kernels when compiled).
  Megatron-Core's ``apply_rotary_pos_emb`` with ``apply_rope_fusion`` (megatron/core/models/common/embeddings/
  rotary_pos_embedding.py; NeMo's Llama configs set it) calls Transformer Engine's fused RoPE
  (transformer_engine/pytorch/attention/rope.py ``FusedRoPEFunc``: one kernel reading the tensor and the fp32
  ``freqs`` (seq, 1, 1, d), cos and sin computed in it): ``t cos + rotate_half(t) sin`` in fp32 here, one fused
  kernel under the compiled model.
* GQA: torchtitan's ``repeat_kv`` of the key/value heads to the query heads before SDPA, as :mod:`.layer` does
  for every grouped-query layer.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from .config import ScaleConfig
from .layer import (F32, _cp_gather, _dropout, _gather, _saved, _scatter, _scores, _softmax, master_shapes,
                    step_of)

scope = jax.named_scope
#: torchtitan's Llama 3 RMSNorm epsilon (ModelArgs.norm_eps) and RoPE base (rope_theta, Llama 3's 500000).
EPS = 1e-5
THETA = 500000.0


def separate_qkv(cfg: ScaleConfig) -> bool:
    """Whether q, k and v come from three projections (torchtitan's wq, wk, wv) rather than one fused linear."""
    return cfg.recompute == "op" or cfg.execution != "compiled"


def param_shapes(cfg: ScaleConfig) -> dict:
    """The layer's weights on one device: two RMSNorm scales, the linears without biases."""
    h, t, dt = cfg.hidden, cfg.t, jnp.dtype(cfg.dtype)
    d = h // cfg.heads

    def lin(i, o):
        return {"w": jax.ShapeDtypeStruct((i, o), dt)}

    norm = {"scale": jax.ShapeDtypeStruct((h,), dt)}
    proj = ({"q": lin(h, cfg.heads * d // t), "k": lin(h, cfg.kv * d // t), "v": lin(h, cfg.kv * d // t)}
            if separate_qkv(cfg) else {"qkv": lin(h, (cfg.heads + 2 * cfg.kv) * d // t)})
    out = {"ln1": norm, **proj, "proj": lin(h // t, h), "ln2": dict(norm),
           "fc1": lin(h, cfg.mlp // t), "fc2": lin(cfg.mlp // t, h)}
    if cfg.mlp_kind == "swiglu":
        out["gate"] = lin(h, cfg.mlp // t)
    return out


def freqs_shape(cfg: ScaleConfig) -> jax.ShapeDtypeStruct:
    """The rotary table the program reads: torchtitan's ``freqs_cis`` (positions x d/2, complex64) where the step
    runs as PyTorch, Megatron's fp32 ``freqs`` (positions x d) under its fused kernels."""
    d = cfg.hidden // cfg.heads
    if cfg.execution == "compiled":
        return jax.ShapeDtypeStruct((cfg.local_seq, d), F32)
    return jax.ShapeDtypeStruct((cfg.local_seq, d // 2), jnp.complex64)


def _rms_norm(p, x):
    """torchtitan's RMSNorm, one torch op a line (fp32 statistics and product, cast back, times the weight)."""
    xf = x.astype(F32)
    sq = xf * xf
    ms = jnp.mean(sq, axis=-1, keepdims=True)
    r = lax.rsqrt(ms + EPS)
    y = xf * r
    y = y.astype(x.dtype)
    return y * p["scale"]


def _rope_complex(x, fc):
    """torchtitan's ``apply_rotary_emb`` on x (b, n, heads, d): the float copy, the complex product (the pairs
    viewed as complex numbers times ``freqs_cis``, viewed back as pairs), the cast back."""
    xf = x.astype(F32)
    with scope("complex"):  # (a scope of its own: the eager model's call of its own, :mod:`.eager_calls`)
        r = _complex_product(xf, fc)
    return r.reshape(x.shape).astype(x.dtype)


@jax.jit
def _complex_product(xf, fc):
    """``view_as_real(view_as_complex(xf) * freqs_cis)``: one kernel in PyTorch (the views are free)."""
    z = lax.complex(xf[..., 0::2], xf[..., 1::2]) * fc[None, :, None, :]
    return jnp.stack([z.real, z.imag], -1)


def _rope_fused(x, freqs):
    """Transformer Engine's fused RoPE on x (b, n, heads, d): ``t cos + rotate_half(t) sin`` in fp32, cast back."""
    xf, f = x.astype(F32), freqs[None, :, None, :]
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * jnp.cos(f) + rot * jnp.sin(f)).astype(x.dtype)


def _dense(w, x, cfg: ScaleConfig):
    """A linear without bias; under an fp8 recipe its three GEMMs in fp8."""
    if cfg.precision != "bf16":
        from ...lower.models.quant import fp8_matmul
        from ...machines.precision import training_recipe

        return fp8_matmul(training_recipe(cfg.precision))(x, w["w"])
    return lax.dot_general(x, w["w"], (((x.ndim - 1,), (0,)), ((), ())))


def _qkv(p, hdn, fc, cfg: ScaleConfig, dense):
    """q (scaled), k, v (b, n, heads/t, d), rotated; the kv/t key and value heads repeated to the query heads."""
    b, n, _ = hdn.shape
    d = cfg.hidden // cfg.heads
    a, kv = cfg.heads // cfg.t, cfg.kv // cfg.t
    if "q" in p:
        q, k, v = dense(p["q"], hdn), dense(p["k"], hdn), dense(p["v"], hdn)
    else:
        qkv = dense(p["qkv"], hdn)
        q, k, v = qkv[..., : a * d], qkv[..., a * d: (a + kv) * d], qkv[..., (a + kv) * d:]
    q, k, v = q.reshape(b, n, a, d), k.reshape(b, n, kv, d), v.reshape(b, n, kv, d)
    rope = _rope_fused if cfg.execution == "compiled" else _rope_complex
    with scope("rope"):
        q, k = rope(q, fc), rope(k, fc)
    q = checkpoint_name(q * jnp.asarray(d ** -0.5, q.dtype), "q")
    k, v = checkpoint_name(k, "k"), checkpoint_name(v, "v")
    return q, jnp.repeat(k, a // kv, axis=2), jnp.repeat(v, a // kv, axis=2)


def layer_fn(cfg: ScaleConfig):
    """``layer(params, x, key, freqs) -> y`` on one device; x (b, s or s/t with sp, h)."""

    def drop(x, key, name):
        return _dropout(x, key, name) if cfg.dropout else (x, key)

    def layer(p, x, key, fc):
        count = [0]

        def dense(w, y):  # the op policy's names: the n-th linear's output is mm<n>
            count[0] += 1
            return checkpoint_name(_dense(w, y, cfg), f"mm{count[0]}")

        with scope("ln1"):
            x = checkpoint_name(x, "ln1_in")
            hdn = checkpoint_name(_rms_norm(p["ln1"], x), "qkv_in")
        with scope("attn"):
            hdn = _gather(hdn, cfg)
            b, n, _ = hdn.shape
            q, k, v = _qkv(p, hdn, fc, cfg, dense)
            with scope("core"):
                probs = _softmax(_scores(q, k, cfg))
                probs, key = drop(probs, key, "attn_mask")
                probs = checkpoint_name(probs, "attn_drop")
                o = lax.dot_general(probs, _cp_gather(v, cfg), (((3,), (1,)), ((0, 1), (0, 2))))
            o = checkpoint_name(jnp.transpose(o, (0, 2, 1, 3)).reshape(b, n, -1), "proj_in")
            y, key = drop(_scatter(dense(p["proj"], o), cfg), key, "drop1_mask")
            x = x + y
        with scope("ln2"):
            x = checkpoint_name(x, "ln2_in")
            hdn = checkpoint_name(_rms_norm(p["ln2"], x), "fc1_in")
        with scope("mlp"):
            hdn = _gather(hdn, cfg)
            g = checkpoint_name(dense(p["fc1"], hdn), "gelu_in")
            if cfg.mlp_kind == "swiglu":
                gate = checkpoint_name(dense(p["gate"], hdn), "gate_in")
                with scope("act"):  # the activation (what a framework's own kernels replace: .mlp_activation)
                    g = checkpoint_name(jax.nn.silu(gate) * g, "fc2_in")
            else:
                with scope("act"):
                    g = checkpoint_name(jax.nn.gelu(g, approximate=True), "fc2_in")
            y, key = drop(_scatter(dense(p["fc2"], g), cfg), key, "drop2_mask")
            return x + y

    policy = jax.checkpoint_policies.save_only_these_names(*_saved(cfg.recompute))
    return jax.checkpoint(layer, policy=policy)


def step_fn(cfg: ScaleConfig):
    """``step(params, master, opt_state, x, dy, key, freqs) -> (params, master, opt_state, y, dx)``."""
    return step_of(layer_fn(cfg))


def lower_llama_layer(cfg: ScaleConfig, locations: bool = True) -> str:
    """StableHLO text of the per-device Llama layer step of ``cfg`` (shapes only: nothing is allocated)."""
    step, tx = step_fn(cfg)
    params = param_shapes(cfg)
    master, opt_state = master_shapes(tx, params)
    n = cfg.local_seq // cfg.t if cfg.sp else cfg.local_seq
    x = jax.ShapeDtypeStruct((cfg.micro_batch, n, cfg.hidden), jnp.dtype(cfg.dtype))
    key = jax.ShapeDtypeStruct((4,), jnp.uint32)
    low = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, master, opt_state, x, x, key, freqs_shape(cfg))
    return low.as_text(debug_info=locations)


def llama_layer_params(cfg: ScaleConfig) -> int:
    """Elements of one device's Llama layer weights (closed form, for checks): no biases, two norm scales."""
    h, f, t, d = cfg.hidden, cfg.mlp, cfg.t, cfg.hidden // cfg.heads
    ffn = (3 if cfg.mlp_kind == "swiglu" else 2) * h * f // t
    return h * (cfg.heads + 2 * cfg.kv) * d // t + h // t * h + ffn + 2 * h

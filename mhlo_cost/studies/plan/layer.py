"""What ONE device runs for one micro-batch of one transformer layer under Megatron's split, lowered to
StableHLO from shapes.

The layer is the bundled GPT's (pre-LayerNorm, causal self-attention, GELU MLP, biases) written at the
sizes one tensor-parallel rank holds: the QKV and fc1 weights split by columns (3h/t, ffn/t), the output
projection and fc2 by rows (h/t, ffn/t), a/t heads. With sequence parallelism the norms, dropouts and
residuals run on s/t of the sequence. Megatron's dropouts are in it (attention probabilities, and after
each block), their masks drawn by ``rng_bit_generator``.

The tensor-parallel collectives are NOT in the program: the device's own compute is, and where a
collective would stand the program holds a local stand-in under the scope ``tp_comm`` (an all_gather:
a broadcast of the shard to the full sequence; a reduce_scatter: a slice; an all_reduce: nothing), so
that shapes stay right; :mod:`mhlo_cost.studies.plan.compose` prices the collectives on the system's network and
leaves the stand-ins' rows out of the compute.

Context parallelism (``cp`` > 1): the device holds seq / cp positions (two load-balanced chunks of the
causal sequence, as Megatron and torchtitan split it); its queries meet every position's keys and values,
which the program gathers with a stand-in under the scope ``cp_comm`` (ring attention's send/recv, or the
all_gather, priced by :mod:`.sharding`): the scores are (s/cp) x s, 1/cp of the layer's attention FLOPs and
of its saved scores. The keys and values are saved at s/cp (the gathered ones are remade in the backward).

The step: ``jax.vjp`` of the layer at the micro-batch's input (the forward, then the backward with the
gradient of the input for the previous layer and of the weights), then Megatron's mixed-precision AdamW on
the layer's weights (fp32 master weights and moments, the bf16 weights cast back from the master).

Activations: the layer runs under ``jax.checkpoint`` with a policy that saves exactly the tensors Megatron
keeps for the backward (Korthikanti et al. 2022, section 4), by name: ``none`` saves them all,
``selective`` all but the softmax, its dropout mask and output (recomputed), ``full`` none of them (only
the layer's input is kept, and the backward recomputes the layer); ``op`` torchtitan's selective op policy
(:data:`OP_SAVED`: the attention's output and every other linear's; q, k and v from three projections).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from ...lower.models.layers import gelu_tanh
from .config import ScaleConfig

scope = jax.named_scope
F32 = jnp.float32
DROP = 0.1
_KEEP = int(round((1 - DROP) * 256))  # a uint8 below this keeps its element

#: The tensors Megatron keeps, by name (Korthikanti's 34 sbh + 5 a s^2 b bytes per layer).
ATTN_SCORES = ("softmax", "attn_mask", "attn_drop")
SAVED = ("ln1_in", "qkv_in", "q", "k", "v", *ATTN_SCORES, "proj_in", "drop1_mask",
         "ln2_in", "fc1_in", "gelu_in", "gate_in", "fc2_in", "drop2_mask")


#: torchtitan's selective op policy (``selective_ac_option = 'op'``, ``_apply_ac_to_transformer_block`` with its
#: ``_save_list``, torchtitan 9dec370 parallelisms/parallelize_llama.py): the outputs of the SDPA call and of every
#: matmul but every second one are saved, in the order the block runs them (wq, wk, wv, wo, w1, w3, w2: the 1st,
#: 3rd, 5th, 7th kept; wk, wo, w3 and everything elementwise recomputed). ``mm<n>``: the n-th linear's output.
OP_SAVED = ("mm1", "mm3", "mm5", "mm7", "proj_in")


def _saved(recompute: str) -> tuple:
    if recompute == "none":
        return SAVED
    if recompute == "selective":
        return tuple(n for n in SAVED if n not in ATTN_SCORES)
    if recompute == "op":
        return OP_SAVED
    return ()


def param_shapes(cfg: ScaleConfig) -> dict:
    h, t, dt = cfg.hidden, cfg.t, jnp.dtype(cfg.dtype)

    def lin(i, o):
        return {"w": jax.ShapeDtypeStruct((i, o), dt), "b": jax.ShapeDtypeStruct((o,), dt)}

    def ln():
        return {"scale": jax.ShapeDtypeStruct((h,), dt), "bias": jax.ShapeDtypeStruct((h,), dt)}

    d = h // cfg.heads
    qkv = (cfg.heads + 2 * cfg.kv) * d // t  # 3h/t; fewer key/value heads with GQA
    # torchtitan's op policy counts wq, wk, wv as three matmuls: the projection as three weights there
    proj = ({"q": lin(h, cfg.heads * d // t), "k": lin(h, cfg.kv * d // t), "v": lin(h, cfg.kv * d // t)}
            if cfg.recompute == "op" else {"qkv": lin(h, qkv)})
    out = {"ln1": ln(), **proj, "proj": lin(h // t, h),
           "ln2": ln(), "fc1": lin(h, cfg.mlp // t), "fc2": lin(cfg.mlp // t, h)}
    if cfg.mlp_kind == "swiglu":  # the gate: a third ffn GEMM
        out["gate"] = lin(h, cfg.mlp // t)
    return out


def _layer_norm(p, x):
    xf = x.astype(F32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    xc = xf - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    y = (xc * lax.rsqrt(var + 1e-5)).astype(x.dtype)
    return y * p["scale"] + p["bias"]


@jax.custom_jvp
def _softmax(s):
    """Softmax over the last axis whose derivative reads its (saved, named) output only, as Megatron's
    fused softmax kernel does."""
    e = jnp.exp(s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    return e / jnp.sum(e, axis=-1, keepdims=True)


@_softmax.defjvp
def _softmax_jvp(primals, tangents):
    (s,), (ds,) = primals, tangents
    y = checkpoint_name(_softmax(s), "softmax")
    return y, y * (ds - jnp.sum(y * ds, axis=-1, keepdims=True))


def _dense(p, x, cfg: ScaleConfig | None = None):
    """A linear; under an fp8 training recipe its three GEMMs in fp8 (:func:`mhlo_cost.lower.models.quant.
    training_dense`)."""
    if cfg is not None and cfg.precision != "bf16":
        from ...lower.models.quant import training_dense
        from ...machines.precision import training_recipe

        return training_dense(training_recipe(cfg.precision))(x, p["w"], p["b"])
    y = lax.dot_general(x, p["w"], (((x.ndim - 1,), (0,)), ((), ())))
    return y + p["b"]


def _dropout(x, key, name: str):
    key, bits = lax.rng_bit_generator(key, x.shape, jnp.uint8)
    mask = checkpoint_name(bits < jnp.uint8(_KEEP), name)
    return jnp.where(mask, x * jnp.asarray(1 / (1 - DROP), x.dtype), jnp.zeros_like(x)), key


def _gather(x, cfg: ScaleConfig):
    """Stand-in for the sequence-parallel all_gather: (b, s/t, h) -> (b, s, h)."""
    if not cfg.sp:
        return x
    with scope("tp_comm"):
        b, n, c = x.shape
        return jnp.broadcast_to(x[:, None], (b, cfg.t, n, c)).reshape(b, cfg.t * n, c)


def _scatter(x, cfg: ScaleConfig):
    """Stand-in for the reduce_scatter (sequence parallel) or all_reduce: the device's part of the sum."""
    if not cfg.sp:
        return x
    with scope("tp_comm"):
        return x[:, : cfg.local_seq // cfg.t]


def _cp_gather(x, cfg: ScaleConfig):
    """Stand-in for context parallelism's K/V exchange: (b, s/cp, heads, d) -> (b, s, heads, d)."""
    if cfg.cp == 1:
        return x
    with scope("cp_comm"):
        b, n, a, d = x.shape
        return jnp.broadcast_to(x[:, None], (b, cfg.cp, n, a, d)).reshape(b, cfg.cp * n, a, d)


def _scores(q, k, cfg: ScaleConfig):
    """The causally masked scores (b, heads/t, n, n x cp) of the local queries against every key."""
    s = lax.dot_general(q, _cp_gather(k, cfg), (((3,), (3,)), ((0, 2), (0, 2))))
    n, full = s.shape[-2], s.shape[-1]
    i = lax.iota(jnp.int32, n) + (full - n)  # (positions: the mask's cost does not depend on which)
    j = lax.iota(jnp.int32, full)
    return jnp.where(i[:, None] >= j[None, :], s, jnp.asarray(jnp.finfo(s.dtype).min, s.dtype))


def _qkv(qkv, cfg: ScaleConfig, d: int):
    """q, k, v (b, n, heads/t, d) from the fused projection; with grouped-query attention the kv/t key and
    value heads (kept as such) are repeated to the heads/t query heads."""
    b, n, _ = qkv.shape
    scale = jnp.asarray(d ** -0.5, qkv.dtype)
    if cfg.kv == cfg.heads:
        qkv = qkv.reshape(b, n, 3, -1, d)
        return (checkpoint_name(qkv[:, :, 0] * scale, "q"), checkpoint_name(qkv[:, :, 1], "k"),
                checkpoint_name(qkv[:, :, 2], "v"))
    a, kv = cfg.heads // cfg.t, cfg.kv // cfg.t
    q = checkpoint_name(qkv[..., : a * d].reshape(b, n, a, d) * scale, "q")
    k = checkpoint_name(qkv[..., a * d: (a + kv) * d].reshape(b, n, kv, d), "k")
    v = checkpoint_name(qkv[..., (a + kv) * d:].reshape(b, n, kv, d), "v")
    return q, jnp.repeat(k, a // kv, axis=2), jnp.repeat(v, a // kv, axis=2)


def _qkv_op(p, hdn, cfg: ScaleConfig, d: int, dense):
    """q, k, v from three projections (torchtitan's wq, wk, wv), for the op policy: the 1st, 2nd, 3rd matmuls."""
    b, n, _ = hdn.shape
    a, kv = cfg.heads // cfg.t, cfg.kv // cfg.t
    q = dense(p["q"], hdn).reshape(b, n, a, d) * jnp.asarray(d ** -0.5, hdn.dtype)
    k = dense(p["k"], hdn).reshape(b, n, kv, d)
    v = dense(p["v"], hdn).reshape(b, n, kv, d)
    return q, jnp.repeat(k, a // kv, axis=2), jnp.repeat(v, a // kv, axis=2)


def _counted(cfg: ScaleConfig):
    """A linear whose output is named ``mm<n>``, n counting the layer's linears (the op policy's)."""
    count = [0]

    def dense(p, x):
        count[0] += 1
        return checkpoint_name(_dense(p, x, cfg), f"mm{count[0]}")
    return dense


def layer_fn(cfg: ScaleConfig):
    """``layer(params, x, key) -> y`` on one device; x (b, s or s/t with sp, h)."""
    d = cfg.hidden // cfg.heads
    on = cfg.dropout

    def drop(x, key, name):
        return _dropout(x, key, name) if on else (x, key)

    def layer(p, x, key):
        dense = _counted(cfg) if cfg.recompute == "op" else (lambda w, y: _dense(w, y, cfg))
        with scope("ln1"):
            x = checkpoint_name(x, "ln1_in")
            hdn = checkpoint_name(_layer_norm(p["ln1"], x), "qkv_in")
        with scope("attn"):
            hdn = _gather(hdn, cfg)
            b, n, _ = hdn.shape
            q, k, v = _qkv_op(p, hdn, cfg, d, dense) if "q" in p else _qkv(dense(p["qkv"], hdn), cfg, d)
            with scope("core"):  # the attention proper (context parallelism's exchange overlaps it)
                probs = _softmax(_scores(q, k, cfg))  # (b, a/t, n, n cp)
                probs, key = drop(probs, key, "attn_mask")
                probs = checkpoint_name(probs, "attn_drop")
                o = lax.dot_general(probs, _cp_gather(v, cfg), (((3,), (1,)), ((0, 1), (0, 2))))  # (b, a/t, n, d)
            o = checkpoint_name(jnp.transpose(o, (0, 2, 1, 3)).reshape(b, n, -1), "proj_in")
            y = _scatter(dense(p["proj"], o), cfg)
            y, key = drop(y, key, "drop1_mask")
            x = x + y
        with scope("ln2"):
            x = checkpoint_name(x, "ln2_in")
            hdn = checkpoint_name(_layer_norm(p["ln2"], x), "fc1_in")
        with scope("mlp"):
            hdn = _gather(hdn, cfg)
            # (the op policy keeps fc1's output and recomputes the gate's, where torchtitan keeps w1's, the gate,
            # and recomputes w3's: the same shapes, so the same bytes kept and FLOPs recomputed)
            g = checkpoint_name(dense(p["fc1"], hdn), "gelu_in")
            if cfg.mlp_kind == "swiglu":  # SiLU(gate) x up
                gate = checkpoint_name(dense(p["gate"], hdn), "gate_in")
                with scope("act"):  # the activation (what a framework's own kernels replace: .mlp_activation)
                    g = checkpoint_name(jax.nn.silu(gate) * g, "fc2_in")
            else:
                with scope("act"):
                    g = checkpoint_name(gelu_tanh(g), "fc2_in")
            y = _scatter(dense(p["fc2"], g), cfg)
            y, key = drop(y, key, "drop2_mask")
            return x + y

    policy = jax.checkpoint_policies.save_only_these_names(*_saved(cfg.recompute))
    return jax.checkpoint(layer, policy=policy)


def adamw(what: str = "layer"):
    """Megatron's AdamW as optax runs it (the ``what`` step says it needs optax where it is not installed)."""
    try:
        import optax
    except ModuleNotFoundError:
        raise ValueError(f"the {what} step needs optax: pip install 'mhlo-cost[train]'") from None
    return optax.adamw(1e-4, weight_decay=1e-4)


def master_update(tx, grads, params, master, opt_state) -> tuple:
    """Mixed-precision AdamW, Megatron's: the gradients cast to fp32, ``tx``'s update of the fp32 master weights,
    the weights cast back from them to their own dtype. Returns ``(params, master, opt_state)``."""
    import optax

    g32 = jax.tree_util.tree_map(lambda g: g.astype(F32), grads)
    updates, opt_state = tx.update(g32, opt_state, master)
    master = optax.apply_updates(master, updates)
    params = jax.tree_util.tree_map(lambda m, p: m.astype(p.dtype), master, params)
    return params, master, opt_state


def master_shapes(tx, params) -> tuple:
    """``(master, opt_state)``: the fp32 master weights of the weight shapes ``params`` and ``tx``'s state on them
    (shapes only)."""
    master = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape, F32), params)
    return master, jax.eval_shape(tx.init, master)


def step_fn(cfg: ScaleConfig):
    """``step(params, master, opt_state, x, dy, key) -> (params, master, opt_state, y, dx)``."""
    return step_of(layer_fn(cfg))


def step_of(layer):
    """``(step, tx)``: ``step(params, master, opt_state, x, dy, key, *extra)``, the forward and backward of
    ``layer(params, x, key, *extra)`` (the Llama layer's ``extra`` is its rotary table) and Megatron's
    mixed-precision AdamW on the fp32 master weights."""
    tx = adamw()

    def step(params, master, opt_state, x, dy, key, *extra):
        with scope("layer"):
            y, vjp = jax.vjp(lambda p, h: layer(p, h, key, *extra), params, x)
            gp, dx = vjp(dy)
        params, master, opt_state = master_update(tx, gp, params, master, opt_state)
        return params, master, opt_state, y, dx

    step.__name__ = step.__qualname__ = "layer_step"
    return step, tx


def lower_layer(cfg: ScaleConfig, locations: bool = True) -> str:
    """StableHLO text of the per-device layer step of ``cfg`` (shapes only: nothing is allocated)."""
    step, tx = step_fn(cfg)
    params = param_shapes(cfg)
    master, opt_state = master_shapes(tx, params)
    n = cfg.local_seq // cfg.t if cfg.sp else cfg.local_seq
    x = jax.ShapeDtypeStruct((cfg.micro_batch, n, cfg.hidden), jnp.dtype(cfg.dtype))
    key = jax.ShapeDtypeStruct((4,), jnp.uint32)
    low = jax.jit(step, donate_argnums=(0, 1, 2)).lower(params, master, opt_state, x, x, key)
    return low.as_text(debug_info=locations)


def layer_params(cfg: ScaleConfig) -> int:
    """Elements of one device's layer weights (closed form, for checks): 12h^2/t-ish plus biases and norms."""
    h, f, t = cfg.hidden, cfg.mlp, cfg.t
    return h * 3 * h // t + 3 * h // t + h // t * h + h + h * f // t + f // t + f // t * h + h + 4 * h


__all__ = ["SAVED", "layer_fn", "step_fn", "step_of", "lower_layer", "param_shapes", "layer_params", "adamw",
           "master_update", "master_shapes"]


def head_step_fn(cfg: ScaleConfig):
    """The last stage's head on one device: final LayerNorm, the vocabulary-parallel logits (V/t columns of
    the untied LM head) and the cross-entropy's local part, forward and backward (Megatron's three small
    all_reduces of the vocabulary-parallel softmax, over b x s values, are left out)."""

    def head(p, x, targets):
        with scope("ln_f"):
            hdn = _layer_norm(p["ln_f"], x)
        with scope("lm_head"):
            hdn = _gather(hdn, cfg)
            z = lax.dot_general(hdn, p["w"], (((2,), (0,)), ((), ())))
        with scope("loss"):  # (the fp32 logits are the loss's: Megatron's ``output.float()`` before it)
            z = z.astype(F32)
            m = lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
            lse = jnp.log(jnp.sum(jnp.exp(z - m), axis=-1)) + m[..., 0]
            picked = jnp.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
            return jnp.mean(lse - picked)

    def step(params, x, targets):
        with scope("head"):
            loss, (gp, dx) = jax.value_and_grad(head, argnums=(0, 1))(params, x, targets)
        return loss, gp, dx

    step.__name__ = step.__qualname__ = "head_step"
    return step


def lower_head(cfg: ScaleConfig, locations: bool = True) -> str:
    """StableHLO text of the last stage's head step of ``cfg`` on one device (shapes only)."""
    dt = jnp.dtype(cfg.dtype)
    params = {"ln_f": {"scale": jax.ShapeDtypeStruct((cfg.hidden,), dt),
                       "bias": jax.ShapeDtypeStruct((cfg.hidden,), dt)},
              "w": jax.ShapeDtypeStruct((cfg.hidden, cfg.vocab // cfg.t), dt)}
    n = cfg.local_seq // cfg.t if cfg.sp else cfg.local_seq
    x = jax.ShapeDtypeStruct((cfg.micro_batch, n, cfg.hidden), dt)
    targets = jax.ShapeDtypeStruct((cfg.micro_batch, cfg.local_seq), jnp.int32)
    low = jax.jit(head_step_fn(cfg)).lower(params, x, targets)
    return low.as_text(debug_info=locations)

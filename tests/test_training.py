"""Training steps: forward, backward (dgrad / wgrad), recompute and optimizer, against closed forms and XLA.

Every expected number is worked out here from the shapes (or, for AdamW, from reading the IR optax
writes), never with the code under test.
"""
from dataclasses import replace

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis.collectors.phases import evidence
from mhlo_cost.lower.models.gpt import GPTConfig
from mhlo_cost.lower.training import lower_train_step
from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.analysis.training import phase_frame, rule_of_thumb
from mhlo_cost.lower.training.steps import lower_step, model_step

B, DIMS = 4, (16, 32, 24, 8)  # batch, and the widths of a 3-layer MLP


def mlp_apply(remat_from=None, input_grad=True):
    """tanh(h @ W) per layer; with ``input_grad`` the input is first scaled elementwise by a parameter (so
    that it needs a gradient); layers from ``remat_from`` on run under jax.checkpoint."""
    def layer(w, h):
        return jnp.tanh(h @ w)

    def apply(params, x):
        h = x * params["scale"] if input_grad else x
        for i, w in enumerate(params["w"]):
            f = jax.checkpoint(layer) if remat_from is not None and i >= remat_from else layer
            with jax.named_scope(f"layers.{i}"):
                h = f(w, h)
        return h
    return apply


def mlp_params(input_grad=True):
    p = {"w": [jax.ShapeDtypeStruct((a, b), jnp.float32) for a, b in zip(DIMS, DIMS[1:])]}
    if input_grad:
        p["scale"] = jax.ShapeDtypeStruct((DIMS[0],), jnp.float32)
    return p


def mlp_step(remat_from=None, input_grad=True, tx="adamw"):
    apply = mlp_apply(remat_from, input_grad)

    def loss(params, x, y):
        d = apply(params, x) - y
        return jnp.mean(d * d)

    x = jax.ShapeDtypeStruct((B, DIMS[0]), jnp.float32)
    y = jax.ShapeDtypeStruct((B, DIMS[-1]), jnp.float32)
    return lower_step(loss, mlp_params(input_grad), (x, y), tx)


def by_phase(lo):
    a = analyze(lo.as_text(debug_info=True), AnalysisOptions(phases=True))
    df = phase_frame(a, a.phases).set_index("phase")
    get = lambda k, c="gemm_flops": int(df.loc[k, c]) if k in df.index else 0  # noqa: E731
    return a, get


LAYER_GEMM = [2 * B * a * b for a, b in zip(DIMS, DIMS[1:])]  # x (B, a) @ W (a, b)
FWD = sum(LAYER_GEMM)


def test_mlp_backward_is_twice_forward_split_evenly():
    _, get = by_phase(mlp_step())
    assert get("forward") == FWD == 2 * B * (16 * 32 + 32 * 24 + 24 * 8)
    assert get("backward/dgrad") == FWD  # every layer: cotangent (B, b) @ W^T
    assert get("backward/wgrad") == FWD  # every layer: input^T (a, B) @ cotangent
    assert get("backward/dgrad") + get("backward/wgrad") == 2 * get("forward")
    assert get("recompute") == 0 and get("optimizer") == 0


def test_first_layer_dgrad_absent_when_the_input_needs_no_gradient():
    a, get = by_phase(mlp_step(input_grad=False))
    assert get("forward") == FWD
    assert get("backward/wgrad") == FWD
    assert get("backward/dgrad") == FWD - LAYER_GEMM[0]  # JAX never forms d(loss)/d(input)
    # What the IR holds: 3 forward dots, 3 wgrad dots, 2 dgrad dots.
    dots = [(p, g) for r, p, g in zip(a.rows, a.phases.phase, a.phases.grad) if r.kind == "dot"]
    assert sorted(dots) == sorted([("forward", "")] * 3 + [("backward", "wgrad")] * 3 + [("backward", "dgrad")] * 2)


def test_remat_recomputes_the_forward_of_the_checkpointed_blocks():
    _, plain = by_phase(mlp_step())
    _, remat = by_phase(mlp_step(remat_from=1))  # layers 1 and 2 under jax.checkpoint, layer 0 not
    assert remat("recompute") == LAYER_GEMM[1] + LAYER_GEMM[2]
    for k in ("forward", "backward/dgrad", "backward/wgrad"):
        assert remat(k) == plain(k)
    _, every = by_phase(mlp_step(remat_from=0))
    assert every("recompute") == FWD


def test_adamw_update_is_vector_work_per_parameter():
    # The IR optax 0.2.8 writes for adamw, per parameter element (read from jax.jit(step).lower(...)):
    #   mu = 0.9 mu + 0.1 g            multiply, multiply, add                 3
    #   nu = 0.999 nu + 0.001 g*g      multiply (g*g), multiply, multiply, add  4
    #   mu / (1 - 0.9^t), nu / (1 - 0.999^t)   divide, divide                  2
    #   mu_hat / (sqrt(nu_hat + 0) + eps)      add, sqrt, add, divide            4  (sqrt: a transcendental)
    #   + weight_decay * p                     multiply, add                    2
    #   * -lr                                  multiply                         1
    #   p + update (apply_updates)             add                              1
    # = 17 vector FLOPs and 1 transcendental per parameter; once per step on scalars: count < max (compare),
    # count + 1, select, 0.9^t and 0.999^t (power: 2 transcendentals), 1 - ... twice = 7 FLOPs.
    counts = {}
    for in_grad in (True, False):
        _, get = by_phase(mlp_step(input_grad=in_grad))
        n = sum(a * b for a, b in zip(DIMS, DIMS[1:])) + (DIMS[0] if in_grad else 0)
        assert get("optimizer", "vector_flops") == 17 * n + 7
        assert get("optimizer", "transcendentals") == n + 2
        assert get("optimizer") == 0
        counts[n] = get("optimizer", "vector_flops")
    (n1, v1), (n2, v2) = sorted(counts.items())
    assert v2 - v1 == 17 * (n2 - n1)  # proportional to the parameters


GPT = GPTConfig(vocab=128, hidden=64, heads=2, layers=2, seq=16, batch=2, dtype="float32")


def gpt_closed_form(cfg):
    c, s, b, h = cfg.hidden, cfg.seq, cfg.batch, cfg.heads
    weights = 2 * b * s * (c * 3 * c + c * c + c * 4 * c + 4 * c * c)  # qkv, proj, fc1, fc2
    attention = 2 * (2 * b * h * s * s * (c // h))  # q k^T and p v, dense (the causal mask is a select)
    return weights, attention


def test_gpt_per_block_backward_is_twice_forward():
    from mhlo_cost.analysis.blocks import add_phase_columns, block_table, training_blocks
    from mhlo_cost.analysis.collectors import assign_blocks

    low = lower_train_step("gpt", GPT)
    a = analyze(low.text, AnalysisOptions(phases=True))
    blocks = training_blocks(assign_blocks(a), a.phases)
    df = add_phase_columns(block_table(a, blocks), a, blocks, a.phases).set_index("block")
    w, att = gpt_closed_form(GPT)
    for i in range(GPT.layers):
        row = df.loc[f"layers.{i}"]
        assert row["fwd_gemm_flops"] == w + att
        assert row["bwd_gemm_flops"] == 2 * (w + att)
        assert row["wgrad_gemm_flops"] == w  # one per weight
        assert row["dgrad_gemm_flops"] == w + 2 * att  # the attention core's four backward dots are all dgrad
        assert row["recompute_gemm_flops"] == 0 and row["bwd_fwd_ratio"] == 2.0
    lm_head = 2 * GPT.batch * GPT.seq * GPT.hidden * GPT.vocab
    assert df.loc["lm_head", "fwd_gemm_flops"] == lm_head
    assert df.loc["optimizer", "opt_vector_flops"] > 0 and df.loc["optimizer", "fwd_gemm_flops"] == 0
    assert df.loc["TOTAL", "gemm_flops"] == a.summary["gemm_flops"]


def test_gpt_remat_recomputes_all_but_the_last_projection():
    # JAX recomputes what the backward reads: a block's fc2 output only meets the residual add, whose
    # backward reads no value, so fc2 is not recomputed.
    a, get = by_phase(lower_step(*model_step("gpt", GPT, remat="block")))
    w, att = gpt_closed_form(GPT)
    fc2 = 2 * GPT.batch * GPT.seq * 4 * GPT.hidden * GPT.hidden
    assert get("recompute") == GPT.layers * (w + att - fc2)
    _, plain = by_phase(lower_step(*model_step("gpt", GPT)))
    for k in ("forward", "backward/dgrad", "backward/wgrad", "optimizer"):
        assert get(k) == plain(k)


def test_scanned_gpt_gives_the_same_phases():
    _, unrolled = by_phase(lower_step(*model_step("gpt", GPT)))
    _, scanned = by_phase(lower_step(*model_step("gpt", replace(GPT, scan=True))))
    for k in ("forward", "backward/dgrad", "backward/wgrad"):
        assert scanned(k) == unrolled(k)


def test_rule_of_thumb_against_the_closed_form():
    low = lower_train_step("gpt", GPT)
    a = analyze(low.text, AnalysisOptions(phases=True))
    info = rule_of_thumb(a, a.phases)
    c, v = GPT.hidden, GPT.vocab
    n = GPT.layers * 12 * c * c + c * v  # weights that enter matrix products (embeddings are gathers)
    d = GPT.batch * GPT.seq
    assert (info["weight_params"], info["tokens"], info["rule_6nd"]) == (n, d, 6 * n * d)
    _, att = gpt_closed_form(GPT)
    assert info["model_flops"] == 6 * n * d + 3 * GPT.layers * att  # the rule leaves attention out
    assert low.info["tokens"] == d


def test_whole_step_equals_xla_cost_analysis():
    # XLA's cost analysis keeps its counts as 32-bit floats: exact integers only below 2**24, so the step
    # is kept under that (at GPT's size above, 23,803,719 FLOPs read back from XLA as 23,803,720).
    from tests.xla_folding import xla_differences

    lo = lower_step(*model_step("gpt", replace(GPT, hidden=32, vocab=64)))
    text = lo.as_text(debug_info=True)
    s = analyze(text, AnalysisOptions(phases=True)).summary
    diff = xla_differences(text)
    ours = (s["gemm_flops"] + s["conv_flops"] + s["vector_flops"] - s["transcendentals"] + diff["convert"]
            - diff["folded"] - diff["identity"])
    ca = lo.cost_analysis()
    assert ours < 2**24
    assert ours == int(ca["flops"])
    assert s["transcendentals"] == int(ca["transcendentals"])
    assert diff["identity"] > 0  # AdamW's nu_hat + eps_root (0.0): one per parameter


def test_names_decide_the_phase():
    assert evidence("jit(train_step)/jvp(layers.0)/attn/dot_general") == "forward"
    assert evidence("jit(train_step)/transpose(jvp(layers.0))/attn/dot_general") == "backward"
    assert evidence("jit(s)/transpose(jvp(layers.0))/jvp(layers.0)/checkpoint/rematted_computation/mlp/add") \
        == "recompute"
    assert evidence("jit(train_step)/mul") == "outside"
    assert evidence("layers/attn/dot_general") is None  # a loop body or callee: the neighbours decide


def test_without_locations_everything_is_forward():
    low = lower_train_step("gpt", replace(GPT, layers=1), locations=False)
    a = analyze(low.text, AnalysisOptions(phases=True))
    assert not a.phases.training
    assert set(a.phases.phase) == {"forward"}
    assert "no backward" in a.phases.notes[0]


def test_user_module_step_with_a_named_loss():
    from mhlo_cost.lower.training import lower_module_train_step

    def factory():
        return mlp_apply(input_grad=False), mlp_params(input_grad=False)

    low = lower_module_train_step(factory, [(B, DIMS[0])], loss="mse", optimizer="sgd")
    _, get = by_phase(type("L", (), {"as_text": lambda self, debug_info=True: low.text})())
    assert get("forward") == FWD and get("backward/wgrad") == FWD
    assert low.info["params"] == sum(a * b for a, b in zip(DIMS, DIMS[1:]))
    with pytest.raises(Exception, match="unknown loss"):
        lower_module_train_step(factory, [(B, DIMS[0])], loss="hinge")


def test_memory_by_category():
    from mhlo_cost.analysis.training import memory_categories

    n = sum(a * b for a, b in zip(DIMS, DIMS[1:]))
    outs = [B * d * 4 for d in DIMS[1:]]  # f32 outputs of the three layers
    diff = B * DIMS[-1] * 4  # the loss's (output - target), read by its backward
    expected = {None: 2 * sum(outs) + diff,  # tanh(h) and 1 - tanh(h) of every layer
                1: outs[0] + outs[1] + outs[0] + diff,  # layer 0 keeps both; blocks 1, 2 keep their input
                0: outs[0] + outs[1] + diff}  # only the inputs of blocks 1 and 2 (block 0's is the argument)
    for remat_from, saved in expected.items():
        a = analyze(mlp_step(remat_from=remat_from, input_grad=False).as_text(debug_info=True),
                    AnalysisOptions(phases=True))
        m = memory_categories(a)
        assert m["parameters"] == m["gradients"] == 4 * n
        assert m["optimizer_state"] == 2 * 4 * n + 4  # mu, nu and the int32 step count
        assert m["batch"] == 4 * B * (DIMS[0] + DIMS[-1])
        assert m["saved_activations"] == saved, remat_from
        # Joined with liveness: once the forward is done, what is live is what the step holds across the
        # boundary (parameters, optimizer state, inputs, saved activations) and the loss's two f32 scalars;
        # the peak comes in the optimizer, where gradients, old and new state meet.
        held = m["parameters"] + m["optimizer_state"] + m["batch"] + saved
        assert held < m["live_after_forward"] <= held + 2 * 4, remat_from
        assert m["peak_phase"] == "optimizer"
        assert m["peak"] > held - saved + m["gradients"]

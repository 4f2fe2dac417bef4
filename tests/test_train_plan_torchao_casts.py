"""torchao eab345c's activation and gradient fp8 casts (:mod:`mhlo_cost.studies.plan.torchao_casts`), against closed
forms worked out here from its code (torchao/float8/float8_linear.py, float8_scaling_utils.py, float8_ops.py at
eab345c, the version of torchtitan's 2024-12 tables):

* forward: each ``Float8Linear`` casts its input, ``max(abs(x))`` (a kernel reading d bytes an element) then
  ``x.to(float32) * scale`` clamped to fp8 (d read, 1 written); under torch.compile AOTAutograd's CSE makes the casts
  of one tensor by several linears one (torch/_functorch/partitioners.py ``fx_graph_cse``), eager casts each;
* backward: ``NoopFwToFloat8BwDynamic`` casts dy once (amax, cast) and ``preprocess_addmm`` transposes the fp8 dy for
  the wgrad (1 read, 1 written); the saved ``input_fp8`` is not cast again, only transposed (1 + 1);
* torchtitan's op policy saves ``max`` but not the cast: the backward's recompute casts the input from the saved amax
  (d + 1), and an input no recomputed GEMM casts (wo's) is cast there for its transpose alone.

The stub memory moves BW bytes a second (plan_stubs), so each expected second is bytes / BW."""
from __future__ import annotations

import pytest

from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.torchao_casts import applies, torchao_cast_seconds
from plan_stubs import BW, StubHW

N = 1 << 20  # elements of each cast tensor (the norms' outputs, dy)
KV = N // 4  # wk's / wv's dy
D = 2  # bf16
#: The program's standalone cast kernels as te_amax.cast_charge keys them (phase/fp8 type/elements/source/act): the
#: attention norm's output cast by wq, wk, wv (3 kernels), the MLP norm's by w1, w3 (2); under op the recompute's
#: casts of them for wk and w3; the backward's dy of w2 cast twice, wk's dy twice, the inputs cast again for the wgrads
#: (3 of the attention norm's, 1 of the attention's output for wo)
CASTS = {f"forward/f8E4M3FN/{N}/17/-": 3, f"forward/f8E4M3FN/{N}/220/-": 2, f"recompute/f8E4M3FN/{N}/339/-": 1,
         f"backward/f8E5M2/{N}/729/-": 2, f"backward/f8E5M2/{KV}/812/-": 2, f"backward/f8E4M3FN/{N}/339/-": 3,
         f"backward/f8E4M3FN/{N}/173/-": 1}
LOWERED = {"forward": 0.004, "backward": 0.009, "recompute": 0.002, "optimizer": 0.0}  # their seconds
FEED = {"forward": 0.001, "backward": 0.003, "recompute": 0.0, "optimizer": 0.0}  # the f32 feeds written for them


def _cfg(**kw) -> ScaleConfig:
    base = dict(layers=4, hidden=256, heads=4, kv_heads=2, ffn=512, seq=256, vocab=128, global_batch=8,
                mlp_kind="swiglu", arch="llama", dropout=False, precision="fp8-tensorwise", attention="fused",
                execution="inductor", recompute="op")
    return ScaleConfig(**(base | kw))


def _cost() -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 2.0, "recompute": 0.5,
                     "optimizer": 0.0}, amax_casts=dict(CASTS), amax_cast_s=dict(LOWERED), cast_feed_s=dict(FEED))


#: The op policy's weight recasts (torchao_casts.op_weight_recast) of the tiny Llama layer of _cfg (h 256, 2 key/value
#: heads of 64, ffn 512): wk 256 x 128, wo 256^2, w3 256 x 512 cast again (3 bytes an element), wq 256^2, wv 256 x 128,
#: w1 256 x 512, w2 512 x 256 cast in their transposes (1 more)
WEIGHTS = 3 * (256 * 128 + 256 ** 2 + 256 * 512) + (256 ** 2 + 256 * 128 + 2 * 256 * 512)


def _dy(n: int) -> int:
    """One dy: its amax (2n), its cast (2n + n), its transpose (n + n)."""
    return D * n + (D + 1) * n + 2 * n


def test_compiled_op_policy():
    """Forward: the two norms' outputs cast once each (CSE), amax + cast, 5N each. Recompute (op): the attention
    norm's output cast from its saved amax, 3N; wo's input (no recompute key) cast there too for its transpose, 3N
    + 2N; and the weights' recasts. Backward: w2's and wk's dy once each (7N, 7KV), the attention norm's fp8 output
    transposed once (2N)."""
    fwd, bwd, rec = torchao_cast_seconds(_cfg(), StubHW(), _cost())
    assert fwd == pytest.approx(2 * 5 * N / BW - 0.004 - 0.001, rel=1e-12)
    assert rec == pytest.approx((3 * N + 5 * N + WEIGHTS) / BW - 0.002, rel=1e-12)
    assert bwd == pytest.approx((_dy(N) + _dy(KV) + 2 * N) / BW - 0.009 - 0.003, rel=1e-12)


def test_eager_casts_in_each_linear():
    """Eager, no recompute: no CSE, each linear casts its own input (3 + 2 casts of 5N), and each of the attention
    norm's three linears transposes its own fp8 input (3 x 2N), wo its own (2N); dy is still cast once."""
    fwd, bwd, rec = torchao_cast_seconds(_cfg(execution="eager", recompute="none"), StubHW(), _cost())
    assert fwd == pytest.approx(5 * 5 * N / BW - 0.005, rel=1e-12)
    assert rec == 0.0
    assert bwd == pytest.approx((_dy(N) + _dy(KV) + 3 * 2 * N + 2 * N) / BW - 0.012, rel=1e-12)


def test_eager_op_policy_is_refused():
    """Eager op-level recompute re-runs each linear's own input and weight cast (no CSE, no Inductor fusion of the
    weight cast into its transpose): not modelled, so the configuration is refused in one sentence; compiled, or
    eager without the op policy, or TE's weight cache, is accepted."""
    why = _cfg(execution="eager").invalid()
    assert why and "not modelled" in why and "\n" not in why
    assert _cfg().invalid() is None
    assert _cfg(execution="eager", recompute="none").invalid() is None
    assert _cfg(execution="eager", fp8_weight_cache=True).invalid() is None


def test_no_recompute_and_full_recompute():
    """Without recompute the saved fp8 inputs are transposed (wo's too: 2N more in the backward) and nothing is
    recomputed; eager full recompute re-runs the forward, its casts with it (the forward's delta again)."""
    fwd, bwd, rec = torchao_cast_seconds(_cfg(recompute="none"), StubHW(), _cost())
    assert rec == 0.0
    assert bwd == pytest.approx((_dy(N) + _dy(KV) + 2 * N + 2 * N) / BW - 0.012, rel=1e-12)
    eager = dict(recompute="full", execution="eager")
    ffwd, fbwd, frec = torchao_cast_seconds(_cfg(**eager), StubHW(), _cost())
    efwd, ebwd, _ = torchao_cast_seconds(_cfg(recompute="none", execution="eager"), StubHW(), _cost())
    assert (ffwd, fbwd) == pytest.approx((efwd, ebwd), rel=1e-12)
    assert frec == pytest.approx(ffwd, rel=1e-12)


def test_compiled_full_recompute_reruns_the_forward_casts():
    """torch.compile over torchtitan 9dec370's ptd_checkpoint_wrapper (every node of the block PREFER_RECOMPUTE,
    nothing inside it saved): the recompute runs the forward's torchao kernels again, the two norms' outputs cast
    once each (CSE), amax + cast, 5N each, in place of the program's recompute casts (0.002 s, no feeds); and every
    fp8 weight's amax and cast, which the dgrads read: the forward's weight casts (0.0007 s) less the program's
    recompute phase's (0.0003 s). The forward and backward are those without recompute."""
    cost = _cost()
    cost.weight_cast_s.update(forward=0.0007, recompute=0.0003)
    fwd, bwd, rec = torchao_cast_seconds(_cfg(recompute="full"), StubHW(), cost)
    nfwd, nbwd, _ = torchao_cast_seconds(_cfg(recompute="none"), StubHW(), cost)
    assert (fwd, bwd) == pytest.approx((nfwd, nbwd), rel=1e-12)
    assert rec == pytest.approx(2 * 5 * N / BW - 0.002 + 0.0007 - 0.0003, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(t=2, sp=True, d=1), dict(fp8_weight_cache=True), dict(precision="fp8-rowwise"),
                                dict(precision="bf16")])
def test_other_stacks_keep_the_lowered_casts(kw):
    """Tensor parallelism (torchao casts the shard before the gather: not modelled), Transformer Engine's stack
    (te_amax's), the rowwise recipe and bf16: nothing changes (without the op policy's weight recasts)."""
    cfg = _cfg(recompute="none", **kw)
    assert not applies(cfg)
    assert torchao_cast_seconds(cfg, StubHW(), _cost()) == (0.0, 0.0, 0.0)


def test_the_norm_kernel_writes_f32_copies_for_the_casts():
    """The lowered program widens the attention norm's output to f32 and takes its abs once per linear (quant._cast),
    and the norm's kernel writes both for the cast kernels that read them: 3 linears x (4 + 4) bytes an element of
    b x s x h; the feed charge takes that kernel's time for those bytes out (on the H100 profile, some)."""
    pytest.importorskip("optax")
    from mhlo_cost.lower.models.quant import WEIGHT_SCOPE
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.costs import dense_layer
    from mhlo_cost.studies.plan.te_amax import standalone_casts
    from mhlo_cost.studies.plan.torchao_casts import _feed_bytes, feed_charge
    from mhlo_cost.studies.study import Study

    cfg = _cfg(micro_batch=2)
    hw = resolve_profile("h100-sxm")
    st = Study(dense_layer(cfg), training="always", hardware=hw, split_phases=True, execution=cfg.execution,
               attention=cfg.attention, dataflow=True)
    a, rf = st.analysis, st.roofline
    ids = {id(k) for k in standalone_casts(a, rf, WEIGHT_SCOPE)}
    removed = {i for i, k in enumerate(rf.fusion.kernels) if id(k) in ids}
    feeds = _feed_bytes(a, rf, removed)
    assert feeds[0] == 3 * 8 * 2 * 256 * 256  # kernel 0: the attention norm's
    assert feed_charge(a, rf, hw, ("forward", "backward", "recompute", "optimizer"))["forward"] > 0.0


def test_op_policy_remakes_the_fp8_weights():
    """Llama 3 8B (Meta's model card: hidden 4096, 8 key/value heads of 128, ffn 14336) under the op policy: wk
    (4096 x 1024), wo (4096^2) and w3 (4096 x 14336), whose GEMMs are recomputed, cast again from the saved amax
    (2 read + 1 written an element, a kernel each); wq (4096^2), wv (4096 x 1024), w1, w2 (4096 x 14336 each) cast
    inside their dgrad transposes (1 byte an element more). Nothing without the op policy, nor under TE's cache or the
    fp8 all-gather (FSDP holds the gathered fp8 weight)."""
    from mhlo_cost.studies.plan.torchao_casts import op_weight_recast

    cfg = ScaleConfig(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, seq=8192, vocab=128256,
                      global_batch=16, mlp_kind="swiglu", arch="llama", dropout=False, precision="fp8-tensorwise",
                      recompute="op", attention="fused", execution="inductor")
    again = 4096 * 1024 + 4096 ** 2 + 4096 * 14336
    once = 4096 ** 2 + 4096 * 1024 + 2 * 4096 * 14336
    assert op_weight_recast(cfg) == (3 * again + once, 3)
    assert op_weight_recast(cfg.with_split(recompute="full")) == (0, 0)
    assert op_weight_recast(cfg.with_split(fp8_weight_cache=True)) == (0, 0)
    fsdp = cfg.with_split(d=8, zero=3, fsdp_version=2, fsdp_float8_all_gather=True)
    assert op_weight_recast(fsdp) == (0, 0)
    rec = torchao_cast_seconds(cfg.with_split(t=2, sp=True), StubHW(), _cost())[2]
    assert rec == pytest.approx((3 * again + once) / 2 / BW, rel=1e-12)  # (each linear's tensor-parallel shard)

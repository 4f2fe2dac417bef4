"""Context parallelism's exchange under a recompute that re-runs the attention (issue 38). Megatron-Core's full
recompute (``tensor_parallel.checkpoint`` over the layer) and its selective one (the core attention module under
it) call Transformer Engine's ``AttnFuncWithCPAndKVP2P`` (``AttnFuncWithCPAndKVAllGather``) forward again in the
backward: its cp - 1 K/V send/recv steps (its K/V all-gather) run again, as PyTorch's ``_templated_ring_attention``
does under full recompute. Worked out here: with no attention time to hide behind, every exchange shows, so the
backward grows by exactly the forward's exchange: (cp - 1) permutes of one rank's K and V, 2 x b x s/cp x kv/t x d
bf16 (or one all-gather of cp of them)."""
import pytest

pytest.importorskip("optax")

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.sharding import cp_exposure

H100 = resolve_profile("dgx-h100")
B, S, H, HEADS, KV, CP = 1, 16384, 4096, 32, 8, 4


def _cfg(**kw) -> ScaleConfig:
    base = dict(layers=2, hidden=H, heads=HEADS, kv_heads=KV, seq=S, vocab=128, cp=CP, t=1, micro_batch=B,
                global_batch=B, cp_comm="p2p", attention="fused")
    return ScaleConfig(**(base | kw))


def _cost() -> LayerCost:
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 2.0, "recompute": 0.0,
                     "optimizer": 0.0}, weight_elems=1000, weight_bytes=2000,
                     core_s={"forward": 0.0, "backward": 0.0})


def _x(**kw):
    return cp_exposure(_cfg(**kw), H100.topology, _cost(), (0, 0), H100)


KV_BYTES = 2 * B * (S // CP) * KV * (H // HEADS) * 2  # one rank's K and V, bf16
RING = tuple((c, (c + 1) % CP) for c in range(CP))


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_te_ring_resends_the_forward_kv_in_the_recompute(recompute):
    plain, again = _x(), _x(recompute=recompute)
    step = estimate(H100.topology, "collective_permute", KV_BYTES, RING).time_s
    assert plain.forward == pytest.approx((CP - 1) * step, rel=1e-12)  # nothing to hide behind: all shows
    assert again.forward == plain.forward and again.forward_total == plain.forward_total
    assert again.backward == pytest.approx(plain.backward + (CP - 1) * step, rel=1e-12)
    assert again.backward_total == pytest.approx(plain.backward_total + (CP - 1) * step, rel=1e-12)


def test_te_all_gather_cp_gathers_again_in_the_recompute():
    plain, again = _x(cp_comm="all_gather"), _x(cp_comm="all_gather", recompute="full")
    gather = estimate(H100.topology, "all_gather", KV_BYTES * CP, (tuple(range(CP)),)).time_s
    assert again.backward == pytest.approx(plain.backward + gather, rel=1e-12)


def test_op_level_recompute_and_none_add_nothing():
    plain = _x()
    for policy in ("op", "none"):
        assert _x(recompute=policy).backward == plain.backward

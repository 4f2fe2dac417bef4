"""The routing assumptions of mixture-of-experts lowering (dropless even spread, capacity factor with dropped
token copies), their command-line errors, and the all_to_all traffic of an expert-parallel split; expected
numbers are closed forms worked out here."""
from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import pytest

from mhlo_cost.cli import main
from mhlo_cost.lower.frontends import FrontendError
from mhlo_cost.lower.frontends.moe import Routing, expert_loads
from mhlo_cost.network.expert_parallel import all_to_all_bytes, estimate_expert_parallel, expert_parallel
from mhlo_cost.network.topology import Link, NetworkError, NodeTopology

from stderr_lines import error_line

B, T, H, F, V = 2, 16, 64, 128, 256
# experts_implementation=eager: accepted by --set (a model-building option, as attn_implementation); the
# lowering replaces the expert layer's dispatch whichever implementation is chosen (test_moe.py: the default)
MIXTRAL3 = dict(num_hidden_layers=2, hidden_size=H, intermediate_size=F, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=V, num_local_experts=3, num_experts_per_tok=2,
                experts_implementation="eager")


def test_routing_parse_and_names():
    assert Routing.parse(None) == Routing.parse("dropless") == Routing()
    r = Routing.parse("capacity:1.25")
    assert r.factor == Fraction(5, 4) and r.name() == "capacity:1.25" and r.scope() == "capacity_1p25"
    assert Routing.parse("capacity:2").name() == "capacity:2"
    for bad in ("capacity", "capacity:0", "capacity:-1", "capacity:x", "top2", ""):
        with pytest.raises(FrontendError, match="unknown routing"):
            Routing.parse(bad)


def test_expert_loads_closed_forms():
    even = expert_loads(32, 2, 4, Routing())  # 64 copies over 4 experts
    assert even.routed == even.rows == (16,) * 4 and even.dropped == 0
    rest = expert_loads(32, 2, 3, Routing())  # 64 = 22 + 21 + 21
    assert rest.routed == (22, 21, 21) and sum(rest.rows) == 64 and rest.dropped == 0
    cap = expert_loads(32, 2, 3, Routing(Fraction(5, 4)))  # ceil(1.25 x 64 / 3) = 27 rows each, none dropped
    assert cap.rows == (27,) * 3 and sum(cap.routed) == 64 and cap.dropped == 0
    tight = expert_loads(32, 2, 3, Routing(Fraction(1, 2)))  # ceil(0.5 x 64 / 3) = 11: 33 kept, 31 dropped
    assert tight.rows == (11,) * 3 and tight.routed == (11,) * 3 and tight.dropped == 31
    assert tight.describe() == "32 tokens x top-2 over 3 experts: 11 per expert, 31 dropped"
    assert cap.describe() == "32 tokens x top-2 over 3 experts: 21-22 per expert, 27 rows computed per expert " \
                             "(capacity), 0 dropped"


def test_bad_routing_is_one_error_line(capsys):
    assert main(["lower", "--hf", "MixtralForCausalLM", "--config", "mixtral", "--routing", "top3",
                 "--input", "2x16:int64"]) == 2
    assert "unknown routing 'top3'" in error_line(capsys.readouterr().err)
    assert main(["lower", "--model", "gpt", "--routing", "dropless"]) == 2
    assert "--routing does not apply to --model" in error_line(capsys.readouterr().err)


_MODELS = ("torch", "torchax", "transformers")
needs_models = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in _MODELS),
                                  reason="pip install 'mhlo-cost[models]'")


def _lower(routing, sets=MIXTRAL3, name="MixtralForCausalLM", config="mixtral"):
    from mhlo_cost.lower.frontends.api import LowerRequest, lower_request

    req = LowerRequest(library="hf", name=name, config=config, overrides=dict(sets), inputs=(f"{B}x{T}:int64",),
                       routing=routing)
    low = lower_request(req)
    return low, low.analyze()


def _expert_gemm(a) -> int:
    return sum(r.gemm_flops for r in a.rows if "/experts/" in r.scope)


@needs_models
@pytest.mark.parametrize("routing, rows, per_expert", [(None, 64, [22, 21, 21]),
                                                       ("capacity:1.25", 3 * 27, [22, 21, 21]),
                                                       ("capacity:0.5", 3 * 11, [11, 11, 11])])
def test_expert_gemm_follows_the_routing(routing, rows, per_expert):
    """32 tokens x top-2 over 3 experts: dropless computes 64 rows (22 + 21 + 21: a batched GEMM of 3 x 21 and
    one of 1 x 1); capacity 1.25 pads to 3 x 27; capacity 0.5 keeps 3 x 11 and drops 31 copies per layer."""
    low, a = _lower(routing)
    assert _expert_gemm(a) == 2 * (2 * rows * 3 * H * F)  # two layers of gate_up (2F) and down (F) per row
    moe = low.info["moe"]
    assert moe["routing"] == (routing or "dropless") and moe["layers"] == 2
    assert moe["dropped"] == (31 * 2 if routing == "capacity:0.5" else 0)
    assert moe["per_expert"] == [per_expert] * 2
    scope = Routing.parse(routing).scope()
    assert all(f"/experts/{scope}/" in r.scope for r in a.rows if "/experts/" in r.scope and r.gemm_flops)


@needs_models
def test_routing_on_a_model_without_experts_is_refused():
    sets = dict(num_hidden_layers=1, hidden_size=H, intermediate_size=F, num_attention_heads=4, vocab_size=V)
    with pytest.raises(FrontendError, match="no expert layer"):
        _lower("capacity:1.25", sets, "LlamaForCausalLM", "llama")


# -- expert parallelism --------------------------------------------------------------------------------------

US = 1e-6
NV = Link("nvlink", 450e9, 0.8, 0.5 * US)
NODE8 = NodeTopology(8, NV, None, 0, True, 7 * US)


def test_all_to_all_bytes_closed_form():
    # 4096 tokens x top-8, hidden 7168, bf16, EP 8: each device sends 7/8 of its copies each way
    assert all_to_all_bytes(4096 * 8, 7168, 2, 8) == 4096 * 8 * 7168 * 2 * 7 // 8
    assert all_to_all_bytes(10, 1, 1, 3) == math.ceil(20 / 3)  # rounded up, never through a float
    assert all_to_all_bytes(64, 64, 2, 1) == 0  # no split: nothing leaves the device
    comm = expert_parallel(64, 64, 2, 4, layers=3)
    assert comm.full_bytes == 64 * 64 * 2 and comm.bytes_per_device == 64 * 64 * 2 * 3 // 4
    assert comm.total_bytes_per_device == 2 * 3 * 64 * 64 * 2 * 3 // 4
    for bad in ((64, 64, 2, 0), (-1, 64, 2, 2), (64, 64.0, 2, 2)):
        with pytest.raises(NetworkError):
            all_to_all_bytes(*bad)


def test_expert_parallel_time_in_one_node():
    """Dispatch and combine of two layers over 8 GPUs of one node: 4 direct all_to_all of 7/8 S each."""
    comm = expert_parallel(4096, 1024, 2, 8, layers=2)
    s = 4096 * 1024 * 2
    one = 7 * US + 7 * NV.latency + 7 / 8 * s / (450e9 * 0.8)
    assert estimate_expert_parallel(NODE8, comm) == pytest.approx(4 * one, rel=1e-12)


@needs_models
def test_lower_says_the_expert_parallel_all_to_all(tmp_path, capsys):
    """Mixtral with 3 experts over 3 devices, float32: each layer sends its 64 token copies of 64 x 4 bytes,
    2/3 of them off the device, in the dispatch and again in the combine."""
    argv = ["lower", "--hf", "MixtralForCausalLM", "--config", "mixtral", "--input", f"{B}x{T}:int64",
            "-o", str(tmp_path / "m.mlir"), "--expert-parallel", "3"]
    argv += [a for k, v in MIXTRAL3.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    each = math.ceil(64 * 64 * 4 * 2 / 3)
    assert "routing dropless" in err and "22-21 per expert" not in err and "21-22 per expert" in err
    assert f"over 3 devices: a dispatch and a combine all_to_all per expert layer, {each:,} bytes sent per " \
           f"device each, {2 * 2 * each:,} bytes per device over the forward" in err
    assert main(["lower", "--model", "gpt", "--expert-parallel", "2"]) == 2
    assert "--expert-parallel does not apply to --model" in error_line(capsys.readouterr().err)
    assert main(["lower", "--model", "gpt", "--expert-parallel", "0"]) == 2
    assert "--expert-parallel: must be a positive integer, got '0'" in error_line(capsys.readouterr().err)

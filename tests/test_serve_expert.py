"""``serve --ep N``: a mixture of experts' routed experts split over N devices, against closed forms worked out
here: the all_to_all bytes (tokens x top-k x hidden x itemsize x (N - 1) / N), their alpha-beta time at the
busiest device, the routed experts' weights and the memory per device, one device's expert kernels, the
system's tokens/s, and the splits refused in one line.

A tiny Mixtral (2 layers, hidden 64, 8 experts, top-2) so that the lowering takes seconds."""
from __future__ import annotations

import importlib.util
import json
from math import ceil
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("torchax") is None:  # (imported through mhlo-cost's shim, never directly)
    pytest.skip("torchax is not installed", allow_module_level=True)
pytest.importorskip("transformers")

from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.studies.serve import StepRequest, lower_step  # noqa: E402
from mhlo_cost.studies.serve.expert import (ExpertSplit, all_to_all_bytes, check, expert_time,  # noqa: E402
                                            routing_facts)
from mhlo_cost.studies.serve.serve import figures  # noqa: E402

B, CTX, BF16 = 8, 16, 2
LAYERS, HIDDEN, HEADS, KV, FFN, VOCAB, E, K = 2, 64, 4, 2, 96, 128, 8, 2
MIXTRAL = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS,
               num_key_value_heads=KV, vocab_size=VOCAB, num_local_experts=E, num_experts_per_tok=K)
SETS = [a for k, v in MIXTRAL.items() for a in ("--set", f"{k}={v}")]
#: The routed experts' weights: per layer E experts of gate and up (FFN x HIDDEN each) and down (HIDDEN x FFN).
EXPERT_BYTES = LAYERS * E * 3 * FFN * HIDDEN * BF16


@pytest.fixture(scope="module")
def step():
    return lower_step(StepRequest(mode="decode", batch=B, context=CTX, hf="MixtralForCausalLM", config="mixtral",
                                  overrides=tuple(sorted(MIXTRAL.items())), dtype="bfloat16"))


def test_all_to_all_bytes_are_the_closed_form():
    # 16 tokens x top-2 x 64 wide x 2 bytes, 3/4 of it leaving each of 4 devices
    assert all_to_all_bytes(16 * 2, 64, 2, 4) == 16 * 2 * 64 * 2 * 3 // 4 == 3072
    # a group's copies over its 2 tensor-parallel devices: each sends half; rounded up where not whole
    assert all_to_all_bytes(16 * 2, 64, 2, 4, tp=2) == 1536
    assert all_to_all_bytes(3, 5, 1, 3) == ceil(3 * 5 * 2 / 3) == 10 and all_to_all_bytes(1, 1, 1, 3) == 1


@pytest.mark.parametrize("split,tp,what", [
    (ExpertSplit(3), 1, "does not divide the model's 8"),
    (ExpertSplit(4), 3, "must divide --ep 4"),
    (ExpertSplit(4, 4.5), 1, "[1, 4]"),  # 4 devices x min(2, 8 / 4) copies / 2: every copy on one device
    (ExpertSplit(8, 4.5), 1, "[1, 4]"),  # 8 x min(2, 1) / 2
    (ExpertSplit(2, 0.5), 1, "[1, 2]"),
])
def test_a_split_the_model_cannot_run_is_refused(split, tp, what):
    with pytest.raises(ValueError, match=what.replace("[", r"\[").replace("]", r"\]")):
        check(split, tp, E, K)


def test_the_lowered_step_says_experts_and_top_k(step):
    assert routing_facts(step.lowered.info["moe"], B) == (E, K)
    assert step.lowered.info["expert_weight_bytes"] == EXPERT_BYTES


def test_one_devices_expert_kernels_scale_compute_by_rows_and_memory_by_experts():
    rows = [SimpleNamespace(scope="model/layers.0/mlp/experts"), SimpleNamespace(scope="model/layers.0/self_attn"),
            SimpleNamespace(scope="model/layers.0/mlp/shared_experts")]
    kern = [SimpleNamespace(head=0, compute_s=4.0, memory_s=8.0, overhead_s=1.0, time_s=9.0),
            SimpleNamespace(head=1, compute_s=1.0, memory_s=1.0, overhead_s=1.0, time_s=2.0),
            SimpleNamespace(head=2, compute_s=1.0, memory_s=1.0, overhead_s=1.0, time_s=2.0)]
    rf = SimpleNamespace(analysis=SimpleNamespace(rows=rows), fusion=SimpleNamespace(kernels=kern))
    # 4 devices, imbalance 1.5, tp 2: compute x 1.5 / 2 = 3.0, memory / 4 = 2.0, the launch 1.0
    assert expert_time(rf, ExpertSplit(4, 1.5), 2) == (9.0, 3.0 + 1.0)


def test_figures_of_the_split_are_the_closed_forms(step):
    hw = get_profile("h100")
    one = figures(step, hw)
    ep = figures(step, hw, split=ExpertSplit(4, 2.0))
    sent = B * K * HIDDEN * BF16 * 3 // 4  # per device, one dispatch
    assert ep.all_to_all_bytes == sent and ep.expert_weight_bytes == EXPERT_BYTES
    # dispatch and combine per layer, at the busiest device's receive (2 x), N - 1 peers
    a2a = LAYERS * 2 * (3 * hw.hop_latency + 2 * sent / hw.link_bandwidth)
    assert ep.all_to_all_time_s == pytest.approx(a2a, rel=1e-12)
    assert ep.comm_time_s == pytest.approx(one.comm_time_s + a2a, rel=1e-12)
    other = one.weight_bytes - EXPERT_BYTES  # attention, norms, router, embeddings: whole on each device
    assert ep.memory_bytes == (other + EXPERT_BYTES // 4 + one.kv_cache_bytes + one.input_bytes
                               + one.activation_bytes)
    # four attention groups of B sequences each: 4 B tokens per step
    assert ep.tokens_per_s == pytest.approx(4 * B / ep.step_time_s, rel=1e-12)
    row = ep.row()
    assert row["ep"] == 4 and row["moe_imbalance"] == 2.0 and "ep" not in one.row()


def test_cli_expert_parallel_json(tmp_path):
    out = tmp_path / "ep.json"
    assert main(["serve", "--hf", "MixtralForCausalLM", "--config", "mixtral", *SETS, "--dtype", "bfloat16",
                 "--batch", str(B), "--context", str(CTX), "--ep", "4", "--tp", "2", "--hardware", "h100",
                 "--cache-dir", str(tmp_path / "c"), "-q", "--format", "json", "-o", str(out)]) == 0
    rows = {r["metric"]: r["value"] for r in json.loads(out.read_text())["rows"]}
    assert rows["ep"] == 4 and rows["attention_groups"] == 2 and rows["moe_imbalance"] == 1.0
    assert rows["all_to_all_bytes"] == B * K * HIDDEN * BF16 * 3 // (4 * 2)
    assert rows["expert_weight_bytes"] == EXPERT_BYTES


@pytest.mark.parametrize("extra,what", [
    (["--hf", "LlamaForCausalLM", "--set", "num_hidden_layers=1", "--set", "hidden_size=64", "--set",
      "intermediate_size=64", "--set", "num_attention_heads=4", "--set", "vocab_size=64", "--ep", "2"],
     "no expert layer"),
    (["--model", "gpt", "--ep", "2"], "bundled gpt has none"),
    (["--hf", "MixtralForCausalLM", "--moe-imbalance", "1.5"], "goes with --ep"),
    (["--hf", "MixtralForCausalLM", "--ep", "2", "--isl", "64", "--osl", "8", "--concurrency", "2"],
     "serving simulation"),
    (["--hf", "MixtralForCausalLM", "--ep", "4", "--tp", "3"], "must divide --ep 4"),
    (["--hf", "MixtralForCausalLM", "--ep", "2", "--moe-imbalance", "inf"], ">= 1"),
    (["--hf", "MixtralForCausalLM", "--ep", "2", "--execution", "eager"], "one device"),
])
def test_cli_refuses_a_split_in_one_line(capsys, extra, what):
    assert main(["serve", *extra, "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error") and what in err[0], err


def test_a_sweeps_table_shows_the_split_only_where_there_is_one(step):
    from mhlo_cost.studies.serve.grid import COLUMNS, table

    hw = get_profile("h100")
    assert list(table([figures(step, hw)]).columns) == list(COLUMNS)
    df = table([figures(step, hw, split=ExpertSplit(2))])
    assert list(df.columns[3:6]) == ["ep", "moe_imbalance", "all_to_all_bytes"]
    assert list(df["all_to_all_bytes"]) == [B * K * HIDDEN * BF16 // 2]

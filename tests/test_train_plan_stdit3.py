"""train-plan --model stdit3: STDiT3 trained with ZeRO-2 + Ulysses as OpenSora 1.2 runs it, checked against closed
forms worked out here at a small configuration (depth 2, hidden 64, 4 heads): the block pair's parameter count
written out from OpenSora's layers, the all_to_all bytes per step (6 per spatial block pair each way, the
forward's repeated by the recompute, each (n-1)/n of b x T x S/n x C bf16), ZeRO-2's bucketed reduce-scatter and
parameter all-gather ((n-1)/n of 2 bytes a parameter over every rank), the optimizer state per GPU (12 bytes a
parameter over the ranks), and the IR's matrix FLOPs against the linears and attentions of both blocks."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.studies.plan.costs import layer_cost
from mhlo_cost.studies.plan.plan import plan
from mhlo_cost.studies.plan.stdit3 import bucket_shape, comm_per_step, stdit3_config, ulysses_collectives

C, H, F, D = 64, 4, 256, 16  # hidden, heads, MLP width, head dim
L_CAP, C_CAP = 8, 32  # caption tokens and T5 width
SMALL = dict(layers=2, hidden=C, heads=H, ffn=F, frames=3, frame_tokens=16, caption_tokens=L_CAP,
             caption_channels=C_CAP)
H100 = resolve_profile("dgx-h100")


def _block_params() -> int:
    """One STDiT3 block: self-attention qkv + proj, cross-attention q, kv, proj, MLP fc1 + fc2 (weights and
    biases), the 6C modulation table, the q and k RMSNorm weights (head dim each)."""
    attn = C * 3 * C + 3 * C + C * C + C
    cross = C * C + C + C * 2 * C + 2 * C + C * C + C
    mlp = C * F + F + F * C + C
    return attn + cross + mlp + 6 * C + 2 * D


def _other_params() -> int:
    """Outside the blocks: the patch embedding (4 channels x 1x2x2), timestep and fps embedders (256 -> C -> C),
    t_block (C -> 6C), caption embedder (T5 width -> C -> C), final layer (2C table, C -> 1x2x2 x 8 channels)."""
    patch = C * 4 * 4 + C
    timestep = 256 * C + C + C * C + C
    return patch + 2 * timestep + C * 6 * C + 6 * C + C_CAP * C + C + C * C + C + 2 * C + C * 32 + 32


@pytest.fixture(scope="module")
def ulysses2_dp2():
    cfg = stdit3_config("17_64_64", cp=2, d=2, micro_batch=1, global_batch=2, **SMALL)
    return cfg, plan(cfg, H100)


def test_pair_and_other_parameters_match_the_model(ulysses2_dp2):
    cfg, p = ulysses2_dp2
    assert p.cost.weight_elems == 2 * _block_params()
    assert cfg.extra_weight_elems == _other_params()


def test_ulysses_all_to_all_bytes_per_step(ulysses2_dp2):
    cfg, p = ulysses2_dp2
    n, b, T, S = 2, 1, 3, 16
    a = 2 * b * T * (S // n) * C  # one rank's q (or k, v, output) of the spatial block, bf16
    rows = ulysses_collectives(cfg)
    assert {(r.nbytes, r.size) for r in rows if r.kind == "all_to_all"} == {(a, n)}
    per_pair = sum(r.count for r in rows if r.kind == "all_to_all")
    assert per_pair == 4 + 2 + 4 + 2 + 4 + 2  # self-attn q, k, v, out + cross q, out: forward, backward, recompute
    sent = sum(v for k, v in comm_per_step(p.cost, cfg).items() if k.endswith("(all_to_all)"))
    assert sent == 2 * per_pair * a * (n - 1) // n  # 2 block pairs
    # the caption keys' and values' gradients all-gathered in the backward: b x L x 2C bf16
    assert [(r.nbytes, r.per) for r in rows if r.kind == "all_gather"] == [(2 * b * L_CAP * 2 * C, "layer_backward")]


def test_zero2_reduce_scatter_and_all_gather_bytes(ulysses2_dp2):
    cfg, p = ulysses2_dp2
    k = 4  # every rank: ulysses 2 x data 2 (ColossalAI's ZeRO is given no group)
    w, extra = 2 * _block_params(), _other_params()
    comm = comm_per_step(p.cost, cfg)
    assert comm["gradients (reduce_scatter)"] == 2 * (2 * w) * (k - 1) // k  # bf16 gradients, each pair's bucket
    assert comm["other gradients (reduce_scatter)"] == 2 * extra * (k - 1) // k
    assert comm["parameters (all_gather)"] == 2 * (2 * w + extra) * (k - 1) // k  # bf16 after the step
    rows = p.iteration.counts["collectives"]
    assert {r["group_size"] for r in rows if r["what"] in ("gradients", "parameters")} == {k}


def test_memory_per_gpu_under_zero2(ulysses2_dp2):
    cfg, p = ulysses2_dp2
    params = 2 * 2 * _block_params() + _other_params()
    m = p.memory
    assert m["weights"] == 2 * params  # bf16 working weights, whole on every rank
    assert m["gradients"] == 2 * params // 4 + 2 * params  # the shard + one bucket (the model is under 12 Mi)
    # fp32 master + Adam's two moments, 12 bytes a parameter, plus AdamW's int32 step count per pair; OpenSora's
    # fp32 EMA model sharded over every rank (scripts/train.py: model_sharding(ema))
    assert m["optimizer_state"] == (12 * params + 4 * 2) // 4 + 4 * params // 4
    one_input = 2 * 1 * 3 * 8 * C  # a block's input on one rank: b x T x S/n x C bf16
    assert (p.cost.input_bytes, p.cost.saved_bytes) == (one_input, one_input)  # checkpointed: the blocks' inputs
    working = layer_cost(cfg.with_split(recompute="none"), H100)  # the block being recomputed: half the pair's
    assert working.saved_bytes > 10 * one_input
    assert m["activations"] == 2 * 2 * one_input + working.saved_bytes // 2


def test_optimizer_state_without_zero_is_whole():
    cfg = stdit3_config("17_64_64", d=2, micro_batch=1, global_batch=2, zero=0, **SMALL)
    m = plan(cfg, H100).memory
    params = 2 * 2 * _block_params() + _other_params()
    assert m["optimizer_state"] == 12 * params + 4 * 2 + 4 * params // 2  # (the EMA is sharded over 2 ranks)
    assert m["gradients"] == 2 * params


def test_model_flops_from_the_ir(ulysses2_dp2):
    cfg, p = ulysses2_dp2
    T, S, n = 3, 16, 2
    N = T * S

    def forward(tokens_s):  # both blocks of one pair on one sample, the caption's kv once
        linears = 2 * N * (3 * C * C + C * C + C * C + C * C + 2 * C * F) + 2 * L_CAP * 2 * C * C
        return 2 * linears + 2 * 4 * N * L_CAP * C + 4 * T * tokens_s ** 2 * C + 4 * tokens_s * T * T * C

    closed = 3 * forward(S) * 2 * 2  # forward + backward, 2 pairs, global batch 2
    assert p.iteration.counts["formula_flops"] == closed
    redundant = 3 * 2 * 2 * L_CAP * 2 * C * C * (n - 1) * 2 * 2  # every Ulysses rank makes the caption's k and v
    assert p.iteration.counts["model_flops"] == closed + redundant


def test_a_frame_must_split_evenly_over_the_ulysses_ranks():
    cfg = stdit3_config("17_64_64", cp=2, micro_batch=1, global_batch=1, **{**SMALL, "frame_tokens": 15})
    assert "does not divide a frame's 15 tokens" in cfg.invalid()  # OpenSora's _split asserts it


def test_cli_plans_and_writes_json(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["train-plan", "--model", "stdit3", "--shape", "17_64_64", "--layers", "2", "--hidden", "64",
               "--heads", "4", "--sp-size", "2", "-d", "2", "--zero", "2", "--hardware", "dgx-a100",
               "--format", "json", "-o", str(out), "--no-cache", "-q"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert "stdit3 17_64_64 ulysses2 d2 mb1 full zero2" in json.dumps(doc)


@pytest.mark.parametrize("argv, says", [
    (["-t", "2"], "-t does not go with --model stdit3"),
    (["--zero", "3"], "not FSDP"),
    (["--recompute", "selective"], "recomputes whole blocks"),
    (["--ulysses", "3"], "Ulysses degree 3 does not divide heads 16"),
    (["-d", "2", "--global-batch", "3"], "--micro-batch x -d"),
    (["--bucket", "720p"], "a bucket is RESOLUTION:FRAMES"),
    (["--bucket", "720p:51", "--shape", "51_1280_720"], "not both"),
    # accepted and silently dropped before the review: each is refused now
    (["--recompute", "op"], "recomputes whole blocks"),
    (["--execution", "eager"], "--execution does not go with --model stdit3"),
    (["-d", "2", "--dp-overlap"], "--dp-overlap does not go"),
    (["--cp-comm-type", "all_gather"], "--cp-comm-type does not go"),
    (["--num-experts", "8", "--ep", "2", "-d", "2"], "--num-experts, --ep do not go"),
    # Megatron's kernels replace ops of the GPT-style layer; STDiT3 lowers its own (flash attention, its own MLP)
    (["--attention-kernel", "megatron"], "--attention-kernel does not go with --model stdit3"),
    (["--activation-kernel", "megatron"], "--activation-kernel does not go with --model stdit3"),
    (["--attention", "unfused", "--attention-kernel", "megatron", "--activation-kernel", "megatron"],
     "--activation-kernel, --attention-kernel do not go"),
])
def test_cli_refuses_what_opensora_does_not_run(argv, says, capsys):
    assert main(["train-plan", "--model", "stdit3", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and says in err[0]


@pytest.mark.parametrize("field", ["attention_kernel", "activation_kernel"])
def test_the_config_refuses_megatrons_kernels(field):
    """Built without the CLI, the configuration itself refuses them (they were accepted and ignored)."""
    from dataclasses import replace

    cfg = stdit3_config("17_64_64", micro_batch=1, global_batch=1, **SMALL)
    assert cfg.invalid() is None
    why = replace(cfg, **{field: "megatron"}).invalid()
    assert why is not None and f"{field} megatron" in why
    assert replace(cfg, attention="unfused", attention_kernel="megatron").invalid() is not None


def test_cli_refuses_ulysses_without_stdit3(capsys):
    assert main(["train-plan", "--model", "gpt-22b", "--sp-size", "2"]) == 2
    assert "goes with --model stdit3" in capsys.readouterr().err


def test_xl2_at_720p_on_64_gpus_ulysses_8_by_data_8():
    """The full model, 51 frames of 1280x720 (latent 15 x 90 x 160: T 15, S 45 x 80 = 3600 tokens a frame), Ulysses
    within each DGX H100 node, data parallel over 8 nodes."""
    cfg = stdit3_config("51_1280_720", cp=8, d=8, micro_batch=1, global_batch=8)
    p = plan(cfg, H100)
    rows = p.iteration.counts["collectives"]
    a2a = {(r["bytes"], r["group_size"]) for r in rows if r["kind"] == "all_to_all"}
    assert a2a == {(2 * 15 * (3600 // 8) * 1152, 8)}
    assert {r["group_size"] for r in rows if r["what"] in ("gradients", "parameters")} == {64}
    params = 28 * p.cost.weight_elems + cfg.extra_weight_elems
    assert 1_100_000_000 < params < 1_250_000_000  # STDiT3-XL/2: "1.1B" (OpenSora 1.2's report)
    assert p.memory["fits"] and p.memory["weights"] == 2 * params
    assert p.iteration.total > p.iteration.cp_comm > 0 and p.iteration.dp_total > 0


def test_opensora_buckets_name_their_base_aspect_ratio():
    # opensora/datasets/aspect.py (v1.2.0): "720p" 0.56 -> (720, 1280), "512" 1.0 -> (512, 512), "144p" -> (144, 256)
    assert bucket_shape("720p:51") == "51_1280_720"
    assert bucket_shape("512:408") == "408_512_512"
    assert bucket_shape("144p:1") == "1_256_144"
    cfg = stdit3_config(bucket_shape("720p:51"))
    assert (cfg.frames, cfg.frame_tokens) == (15, 45 * 80)  # 51 frames -> 15 latent; 720 x 1280 / 8 / 2


def test_the_execution_is_part_of_the_block_pairs_key():
    """Two configurations that differ only in how the step runs share no cached cost."""
    from dataclasses import replace

    cfg = stdit3_config("17_64_64", **SMALL)
    assert cfg.layer_key() != replace(cfg, execution="eager").layer_key()

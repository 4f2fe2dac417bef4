"""benchmarks/validate_training.py and its data (benchmarks/data/published_training.toml): the file parses, every
run has a source with a URL and the fields the pricer reads, the published figures convert to iteration times
by the sources' own formulas (worked out here), rows train-plan cannot express say why, and the script runs on a
small data file."""
from __future__ import annotations

import copy
import os
import tomllib

import pytest
from helpers import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
vt = script("benchmarks/validate_training.py")


@pytest.fixture(scope="module")
def data():
    return vt.load()


def _run(data, rid):
    return next(r for r in data["run"] if r["id"] == rid)


def test_the_data_file_has_twenty_runs_from_four_sources_on_a100_and_h100(data):
    runs, sources = data["run"], data["source"]
    assert len(runs) >= 20
    used = {r["source"] for r in runs}
    assert len(used) >= 4 and used <= set(sources)
    gpus = " ".join(sources[s]["gpu"] for s in used)
    assert "A100" in gpus and "H100" in gpus
    assert any(sources[s]["year"] >= 2024 for s in used)


def test_every_run_has_a_source_url_and_the_fields_the_pricer_reads(data):
    for r in data["run"]:
        src = data["source"][r["source"]]
        assert src["url"].startswith("https://"), r["id"]
        assert all(k in r for k in vt.RUN_FIELDS), r["id"]
        assert any(k in r for k in vt.METRICS), r["id"]
        model = data["model"][r["model"]]
        assert all(k in model for k in vt.MODEL_FIELDS), r["id"]
        split = [r.get(k, 1) for k in ("tp", "pp", "cp", "dp")]
        assert split[0] * split[1] * split[2] * split[3] == r["gpus"], r["id"]


def test_check_finds_a_broken_row(data):
    broken = copy.deepcopy(data)
    row = broken["run"][0]
    row["dp"] = row["dp"] + 1  # the degrees no longer multiply to the GPUs
    del row["micro_batch"]
    broken["run"].append(copy.deepcopy(broken["run"][1]))  # a repeated id
    bloom = next(r for r in broken["run"] if r["id"] == "bloom2022/gbs2048")
    bloom["layers_per_stage"] = bloom["layers_per_stage"][:-1]  # 11 stages of 12
    problems = " | ".join(vt.check(broken))
    assert "layers_per_stage must give one count per pipeline stage" in problems
    assert "not gpus" in problems and "no micro_batch" in problems and "id repeated" in problems
    assert vt.check(data) == []


def test_a_repository_url_must_name_a_commit(data):
    broken = copy.deepcopy(data)
    broken["source"]["nemo2407"]["url"] = "https://github.com/NVIDIA/NeMo"
    assert any("commit" in p for p in vt.check(broken))


def test_narayanan_tflops_convert_by_their_equation_3(data):
    # 1T row: B 3072, s 2048, l 128, h 25600, V 51200, 163 TFLOP/s per GPU on 3072 GPUs
    b, s, lay, h, v = 3072, 2048, 128, 25600, 51200
    flops = 96 * b * s * lay * h ** 2 * (1 + s / (6 * h) + v / (16 * lay * h))
    run = _run(data, "narayanan2021/gpt-1008b")
    got = vt.published_seconds(run, data["model"]["gpt-1008b"], data["source"]["narayanan2021"])
    assert got == pytest.approx(flops / (163e12 * 3072), rel=1e-12)
    # the paper's aggregate column (502.0 PFLOP/s) is its per-GPU column (163, rounded) times 3072 GPUs
    assert round(502.0e3 / 3072) == 163


def test_a_measured_iteration_is_taken_as_it_is(data):
    run = _run(data, "bloom2022/gbs2048")
    assert vt.published_seconds(run, data["model"]["bloom-176b"], data["source"]["bloom2022"]) == 104.70
    assert sum(run["layers_per_stage"]) == 70 and len(run["layers_per_stage"]) == run["pp"] == 12


def test_tokens_per_second_convert_to_an_iteration(data):
    run = _run(data, "bridge2511/llama3-70b-h100")  # GBS 128 x 8192 tokens, 1602 tokens/s/GPU on 64 GPUs
    got = vt.published_seconds(run, data["model"]["llama3-70b"], data["source"]["bridge2511"])
    assert got == pytest.approx(128 * 8192 / (1602 * 64), rel=1e-12)


def test_rows_train_plan_cannot_express_say_why_and_slot_in_when_it_can(data):
    fields = {"t", "p", "d"}
    fsdp, cp = _run(data, "torchtitan2412/t1-8b-fsdp"), _run(data, "nemo2407/llama3-8b")
    assert vt.why_not(fsdp, data["model"]["llama3-8b"], fields) == "FSDP (ZeRO-3): not an option yet"
    assert "context parallelism" in vt.why_not(cp, data["model"]["llama3-8b"], fields)
    assert vt.why_not(cp, data["model"]["llama3-8b"], fields | {"cp"}) is None  # the option, once it exists
    moe = _run(data, "bridge2511/deepseek-v3-b200")
    assert "expert parallelism" in vt.why_not(moe, data["model"]["deepseek-v3"], fields)
    bloom = _run(data, "bloom2022/gbs2048")  # 5 + 10 x 6 + 5 layers, the tied embedding on the first and last
    assert vt.why_not(bloom, data["model"]["bloom-176b"], fields) == "uneven pipeline stages: not an option yet"
    uneven = dict(_run(data, "nemo2407/llama2-7b"), pp=3)  # 32 layers on 3 stages
    assert "uneven pipeline" in vt.why_not(uneven, data["model"]["llama2-7b"], fields)
    assert vt.why_not(_run(data, "narayanan2021/gpt-1.7b"), data["model"]["gpt-1.7b"], fields) is None


def test_the_issue_target_counts_fsdp_cp_fp8_and_uneven_rows(data):
    m = data["model"]
    assert vt.modern(_run(data, "torchtitan2412/t1-8b-fsdp"), m["llama3-8b"])  # FSDP, bf16
    assert vt.modern(_run(data, "nemo2407/llama2-7b"), m["llama2-7b"])  # fp8
    assert vt.modern(_run(data, "bridge2511/llama3.1-405b-h100"), m["llama3.1-405b"])  # CP, uneven
    assert not vt.modern(_run(data, "narayanan2021/gpt-1008b"), m["gpt-1008b"])


def test_the_row_becomes_train_plans_configuration(data):
    run = _run(data, "nemo2407/llama2-70b")
    cfg = vt.scale_config(run, data["model"]["llama2-70b"])
    assert (cfg.t, cfg.p, cfg.d, cfg.interleave, cfg.sp) == (4, 4, 4, 20, True)
    assert (cfg.kv_heads, cfg.ffn, cfg.mlp_kind, cfg.zero_stage, cfg.dp_overlap) == (8, 28672, "swiglu", 1, True)
    assert cfg.precision == "fp8-tensorwise" and cfg.dropout is False and cfg.invalid() is None
    assert cfg.attention == "fused" and cfg.grad_reduce_fp32  # flash attention; bf16 gradients reduce in fp32
    assert cfg.micro_batches == 128 // (1 * 4)


def test_fsdp_cp_uneven_stages_and_fp16_gradients_reach_the_configuration(data):
    m = data["model"]
    hsdp = vt.scale_config(dict(_run(data, "torchtitan2412/t6-405b-cp2")), m["llama3.1-405b"])
    assert (hsdp.zero_stage, hsdp.dp_shard, hsdp.cp, hsdp.d) == (3, 0, 2, 4)  # fsdp 4 = all of dp 4
    group = vt.scale_config(dict(_run(data, "torchtitan2412/t1-8b-fsdp"), fsdp=4), m["llama3-8b"])
    assert (group.dp_shard, group.replicate_degree) == (4, 2)  # a group of 4 of dp 8: HSDP
    bloom = vt.scale_config(_run(data, "bloom2022/gbs2048"), m["bloom-176b"])
    assert bloom.stage_layers() == (5,) + (6,) * 10 + (5,) and bloom.zero_stage == 1 and bloom.invalid() is None
    old = vt.scale_config(_run(data, "narayanan2021/gpt-1.7b"), m["gpt-1.7b"])
    assert old.grad_bytes == 2 and old.attention == "unfused"  # fp16 without fp32 gradient accumulation


TINY = """
schema_version = 1
[source.s]
title = "t"
url = "https://example.org/paper"
where = "Table 1"
year = 2024
gpu = "A100"
system = "selene"
metric = "tokens_per_s_per_gpu"
[model.tiny]
layers = 4
hidden = 64
heads = 4
vocab = 128
mlp = "gelu"
source = "s"
[[run]]
id = "s/priced"
source = "s"
model = "tiny"
table = "row 1"
gpus = 4
seq = 32
global_batch = 8
micro_batch = 1
tp = 2
pp = 2
dp = 1
precision = "bf16"
recompute = "full"
tokens_per_s_per_gpu = 1000
[[run]]
id = "s/fsdp"
source = "s"
model = "tiny"
table = "row 2"
gpus = 4
seq = 32
global_batch = 8
micro_batch = 1
dp = 4
fsdp = 4
zero = 3
precision = "bf16"
recompute = "full"
tokens_per_s_per_gpu = 1000
"""


def _torchtitan_split(layers: int, stages: int) -> tuple:
    """torchtitan's generate_split_points (9dec370) without split points given, worked out here: stage 0 takes
    layers // stages, the middle stages one more each while the remainder lasts, the last the rest."""
    base, extra = divmod(layers, stages)
    sizes = [base]
    for _ in range(stages - 2):
        sizes.append(base + (1 if extra > 0 else 0))
        extra -= 1
    return tuple(sizes + [layers - sum(sizes)])


def test_torchtitans_405b_pipelines_split_126_layers_as_its_code_does(data):
    m = data["model"]["llama3.1-405b"]
    assert _torchtitan_split(126, 8) == (15,) + (16,) * 6 + (15,)
    for rid in ("torchtitan2412/t5-405b-1f1b", "torchtitan2412/t6-405b-cp1", "torchtitan2412/t6-405b-cp8"):
        run = _run(data, rid)
        cfg = vt.scale_config(run, m)
        assert cfg.stage_layers() == _torchtitan_split(m["layers"], run["pp"]) and cfg.invalid() is None, rid
    # pipeline_parallel_microbatches unset: as many micro-batches as stages, the local batch 32 split in 8 of 4
    one_f_one_b = vt.scale_config(_run(data, "torchtitan2412/t5-405b-1f1b"), m)
    assert (one_f_one_b.micro_batch, one_f_one_b.micro_batches) == (4, 8)


def test_torchtitans_interleaved_405b_row_takes_two_virtual_stages_a_rank(data):
    """Interleaved1F1B (a PipelineScheduleMulti): 2 stages a rank, 16 virtual stages split as above (7, 8 x 14, 7);
    rank r runs stages r and r + 8, so the ranks hold 15, 16 x 6, 15 layers."""
    m = data["model"]["llama3.1-405b"]
    virtual = _torchtitan_split(126, 16)
    assert virtual == (7,) + (8,) * 14 + (7,)
    per_rank = tuple(virtual[r] + virtual[r + 8] for r in range(8))
    cfg = vt.scale_config(_run(data, "torchtitan2412/t5-405b-interleaved"), m)
    assert (cfg.stage_layers(), cfg.interleave, cfg.micro_batches) == (per_rank, 2, 8) and cfg.invalid() is None


def test_bridges_405b_row_splits_as_megatron_core_counts_embedding_and_loss(data):
    """Megatron-Bridge's 405B recipe counts the embedding and the loss as layers: 128 over 8 x 8 virtual stages, 2
    each, the first and last 1; a rank holds every 8th virtual stage: 1 + 7 x 2 = 15 on the first and last, 16."""
    virtual = (1,) + (2,) * 62 + (1,)
    per_rank = tuple(sum(virtual[r::8]) for r in range(8))
    cfg = vt.scale_config(_run(data, "bridge2511/llama3.1-405b-h100"), data["model"]["llama3.1-405b"])
    assert (cfg.stage_layers(), cfg.interleave) == (per_rank, 8) and cfg.invalid() is None
    assert cfg.with_split(first_stage_layers=0, last_stage_layers=0, account_embedding=True,
                          account_loss=True).stage_layers() == per_rank


def test_the_stacks_own_mechanisms_reach_the_configuration(data):
    m = data["model"]
    cp = vt.scale_config(_run(data, "torchtitan2412/t6-405b-cp4"), m["llama3.1-405b"])
    assert (cp.cp_comm, cp.kv_repeat) == ("torch-allgather", True)
    bloom = vt.scale_config(_run(data, "bloom2022/gbs16"), m["bloom-176b"])
    assert (bloom.dp_reduce, bloom.tied_embedding, bloom.grad_accum_pass) == ("all_reduce", True, True)
    megatron = vt.scale_config(_run(data, "nemo2407/llama3-70b"), m["llama3-70b"])
    assert (megatron.cp_comm, megatron.dp_reduce, megatron.tied_embedding) == ("p2p", "reduce_scatter", False)


def test_narayanans_rows_take_the_authors_table_1_scripts(data):
    """examples/sc21/run_table_1.sh (Megatron-LM, 2021): MBS 16, 16, 16, 8, 4, 2, 2, 1, 1, 1; interleaved stages of
    --num-layers-per-virtual-pipeline-stage 5, 5, 3, 1 layers for 76B, 145B, 310B, 530B (vp = layers / pp / that);
    --DDP-impl torch (overlapped all-reduce) up to 18B, local above."""
    sizes = ("1.7b", "3.6b", "7.5b", "18.4b", "39.1b", "76.1b", "145.6b", "310.1b", "529.6b", "1008b")
    mbs = dict(zip(sizes, (16, 16, 16, 8, 4, 2, 2, 1, 1, 1)))
    per_virtual = {"76.1b": 5, "145.6b": 5, "310.1b": 3, "529.6b": 1}
    for size in sizes:
        run, m = _run(data, f"narayanan2021/gpt-{size}"), data["model"][f"gpt-{size}"]
        cfg = vt.scale_config(run, m)
        vp = m["layers"] // run["pp"] // per_virtual[size] if size in per_virtual else 1
        assert (cfg.micro_batch, cfg.interleave, cfg.dp_overlap) == (mbs[size], vp, run["pp"] == 1), size
        assert cfg.invalid() is None, size


#: NeMo 24.07's rows whose launcher yaml (NeMo-Framework-Launcher 24.07, conf/training) sets
#: cross_entropy_loss_fusion: true (Llama 3, Nemotron 3); every other model's yaml leaves Megatron-Core's default off
NEMO_FUSED_CE = ("nemo2407/llama3-8b", "nemo2407/llama3-70b", "nemo2407/nemotron3-8b", "nemo2407/nemotron3-22b")


def _cross_entropy(run: dict) -> str:
    if run["id"] in NEMO_FUSED_CE:
        return "megatron-fused"
    return "megatron" if run["source"] in ("narayanan2021", "bloom2022", "nemo2407") else "fused"


def test_megatron_lms_own_passes_reach_the_rows_whose_code_runs_them(data):
    """Megatron-LM 2021's rows (fp16, its eager cross-entropy; --DDP-impl local, its main-gradient hook, from 39B:
    run_table_1.sh) and DeepSpeed-Megatron's BLOOM (the same cross-entropy, bf16) take them; NeMo 24.07's rows take
    Megatron-Core's cross-entropy as their launcher yaml sets it (fused for Llama 3 and Nemotron 3, the unfused
    kernels for the others); Megatron-Bridge's (TE's one-pass kernel) and the PyTorch stacks' keep the head's own."""
    for run in data["run"]:
        cfg = vt.scale_config(run, data["model"][run["model"]])
        src = run["source"]
        local = src == "narayanan2021" and not run.get("dp_overlap", False)
        assert cfg.cross_entropy == _cross_entropy(run), run["id"]
        assert cfg.loss_scale == (src == "narayanan2021"), run["id"]
        assert cfg.main_grad_add == local, run["id"]
        assert cfg.torch_ddp == (src == "narayanan2021" and run.get("dp_overlap", False)), run["id"]  # DDP-impl torch
    assert sum(vt.scale_config(r, data["model"][r["model"]]).main_grad_add for r in data["run"]) == 6


def test_megatrons_own_activation_kernels_reach_the_rows_whose_code_runs_them(data):
    """Megatron-LM 2021 (--bias-gelu-fusion on by default), Megatron-DeepSpeed's BLOOM, NeMo 24.07's GPT-3 and Llama
    rows (their launcher yamls: bias_activation_fusion true) and Megatron-Bridge's Llama rows run the activation as
    Megatron's own kernels; Nemotron's squared-ReLU is NeMo's eager kernels (bias_activation_fusion false), and the
    PyTorch stacks (torchtitan, llm-foundry) and MoE rows keep the compiled epilogue."""
    megatron = ("narayanan2021", "bloom2022", "nemo2407", "bridge2511")
    for run in data["run"]:
        mlp = data["model"][run["model"]]["mlp"]
        cfg = vt.scale_config(run, data["model"][run["model"]])
        own = run["source"] in megatron and mlp in ("gelu", "swiglu")
        assert cfg.activation_kernel == ("megatron" if own else "compiled"), run["id"]
        assert (cfg.activation == "squared-relu") == (mlp == "squared_relu"), run["id"]
    assert sum(vt.scale_config(r, data["model"][r["model"]]).activation_kernel == "megatron"
               for r in data["run"]) == 24


def test_megatrons_own_attention_kernels_reach_exactly_the_unfused_rows(data):
    """Every unfused-attention row is Megatron-LM 2021's (de7dc40) or Megatron-DeepSpeed's BLOOM, whose
    FusedScaleMaskSoftmax runs scaled_upper_triang_masked_softmax at their shapes: all 12 take attention_kernel
    megatron and are valid; no flash row does."""
    for run in data["run"]:
        cfg = vt.scale_config(run, data["model"][run["model"]])
        unfused = run.get("attention") == "unfused"
        assert cfg.attention_kernel == ("megatron" if unfused else "compiled"), run["id"]
        assert not unfused or run["source"] in ("narayanan2021", "bloom2022"), run["id"]
        assert not unfused or cfg.invalid() is None, run["id"]
    assert sum(r.get("attention") == "unfused" for r in data["run"]) == 12


def test_nemo_and_bridge_rows_overlap_their_tensor_parallel_collectives(data):
    """Every NeMo / Megatron-Bridge row with a tensor degree above 1 runs TE's userbuffers overlap (the recipes'
    tp_comm_overlap); Megatron-Bridge's fp8 H100 configurations ring-exchange the reduce-scatters."""
    m = data["model"]
    rows = [r for r in data["run"] if r["source"] in ("nemo2407", "bridge2511") and r.get("tp", 1) > 1]
    assert len(rows) == 10
    for r in rows:
        cfg = vt.scale_config(r, m[r["model"]])
        assert cfg.tp_comm_overlap and cfg.sp and cfg.invalid() is None, r["id"]
        assert cfg.tp_overlap_rs == ("ring_exchange" if r["source"] == "bridge2511" else "pipeline"), r["id"]


def test_a_rows_compile_field_names_its_execution_model(data):
    m = data["model"]
    eager = vt.scale_config(_run(data, "torchtitan2412/t1-8b-fsdp"), m["llama3-8b"])
    compiled = vt.scale_config(_run(data, "torchtitan2412/t1-8b-fsdp-compile"), m["llama3-8b"])
    megatron = vt.scale_config(_run(data, "nemo2407/llama3-8b"), m["llama3-8b"])
    assert (eager.execution, compiled.execution, megatron.execution) == ("eager", "inductor", "compiled")
    foundry = _run(data, "llmfoundry2024/a100-7b-8")  # eager, priced as fused kernels: said so
    assert vt.scale_config(foundry, m["mpt-7b"]).execution == "compiled"
    assert any("eager priced as fused" in a for a in vt.approximations(foundry, m["mpt-7b"]))
    assert eager.recompute == "op" and eager.invalid() is None  # torchtitan's selective op policy
    layer = _run(data, "torchtitan2406/8b-selective-layer")  # every 2nd block whole, the others keeping everything
    cfg = vt.scale_config(layer, m["llama3-8b"])
    assert vt.why_not(layer, m["llama3-8b"]) is None and cfg.invalid() is None
    assert (cfg.recompute, cfg.recompute_every, cfg.recompute_num_layers) == ("full", 2, 0)


def test_llm_foundrys_rows_say_what_their_runs_reduced_in_and_which_attention_they_called(data):
    """Composer's FSDP mixed precision as each README row names it: DEFAULT reduces gradients in fp32, PURE (the
    A100 70b row) in bf16; every row ran MPT's Triton attention, priced as FlashAttention-2 and said so."""
    m = data["model"]
    pure, default = _run(data, "llmfoundry2024/a100-70b-64"), _run(data, "llmfoundry2024/h100-70b-64")
    assert vt.scale_config(pure, m["mpt-70b"]).grad_bytes == 2
    assert vt.scale_config(default, m["mpt-70b"]).grad_bytes == 4
    rows = [r for r in data["run"] if r["source"] == "llmfoundry2024"]
    assert rows and all(any("Triton flash attention" in a for a in vt.approximations(r, m[r["model"]])) for r in rows)


def test_the_script_runs_on_a_small_data_file(tmp_path, capsys):
    pytest.importorskip("optax")
    path = tmp_path / "runs.toml"
    path.write_text(TINY)
    assert vt.main(["--data", str(path)]) == 0
    out = capsys.readouterr().out
    published = 8 * 32 / (1000 * 4)  # global batch x seq over tokens/s/GPU x GPUs
    assert next(line for line in out.splitlines() if line.startswith("s/priced")).split()[1] == f"{published:.3f}"
    data = tomllib.loads(TINY)
    assert vt.check(data) == []
    row = vt.price(data["run"][0], data)
    assert row["published_s"] == pytest.approx(published, rel=1e-12)
    assert row["estimate_s"] > 0 and row["ratio"] == row["estimate_s"] / published
    assert "NOT PRICED" not in out  # the FSDP row is priced now
    assert "held out (nothing fitted on any source): median |error|" in out
    assert "0 rows not expressible yet" in out
    assert "rows using FSDP, CP, fp8 or uneven stages: 1 priced of 1" in out


def test_only_megatron_bridges_fsdp_row_registers_nccl_user_buffers(data):
    """Megatron-Bridge's 25.11 H100 Llama 3 8B configuration (Megatron FSDP) sets ddp.nccl_ub; no other row's
    framework does (NeMo 24.07 has no such option; the other Bridge rows run Megatron-Core's DDP)."""
    ub = [r["id"] for r in data["run"] if vt.scale_config(r, data["model"][r["model"]]).nccl_ub]
    assert ub == ["bridge2511/llama3-8b-h100"]

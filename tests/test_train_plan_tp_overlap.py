"""Transformer Engine's userbuffers overlap of the tensor-parallel collectives (``tp_comm_overlap``), checked against
closed forms worked out here: each linear's GEMM FLOPs from the sizes (which dot pairs with which collective), and
each pair's exposed seconds from TE's chunking (a ring step moves S/t bytes to the neighbour; NeMo's pipelined
reduce-scatter runs in 4 splits of S/4), the collectives' seconds taken from the network model as
tests/test_train_plan_sharding.py takes them."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.network import estimate, resolve_profile
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from mhlo_cost.studies.plan.layer import lower_layer
from mhlo_cost.studies.plan.tp_overlap import LINEARS, linear_rows
from mhlo_cost.studies.study import Study
from plan_stubs import stub_cost

SELENE = resolve_profile("selene")
SMS, UB = 108, 16  # A100's SMs; the SMs TE's pipelined and bulk overlaps take (initialize_ub's default num_sm)
MARGIN = SMS / (SMS - UB)  # a pipelined GEMM on the SMs left: G x 108 / 92
BIG = dict(layers=4, hidden=8192, heads=64, seq=8192, vocab=128, micro_batch=1, global_batch=1)
S = 1 * 8192 * 8192 * 2  # the activation a collective moves: b x s x h, bf16


def _net(t: int):
    group = (tuple(range(t)),)
    return {"step": estimate(SELENE.topology, "collective_permute", S // t, ((0, 1),)).time_s,
            "rs_chunk": estimate(SELENE.topology, "reduce_scatter", S // 4, group).time_s,
            "ag": estimate(SELENE.topology, "all_gather", S, group).time_s,
            "rs": estimate(SELENE.topology, "reduce_scatter", S, group).time_s}


@pytest.mark.parametrize("mlp_kind, recompute", [("gelu", "none"), ("swiglu", "op")])
def test_each_linear_is_found_by_its_flops(mlp_kind, recompute):
    """QKV 2 b s h (h + 2 kv d)/t, proj 2 b s h h/t, fc1 2 b s h f/t (the gate as much again), fc2 2 b s f/t h;
    each backward GEMM (data and weight gradient) as many FLOPs as its forward."""
    b, s, h, a, kv, f, t = 2, 64, 128, 4, 2, 256, 2
    cfg = ScaleConfig(layers=2, hidden=h, heads=a, kv_heads=kv, seq=s, vocab=128, ffn=f, t=t, sp=True,
                      micro_batch=b, global_batch=b, mlp_kind=mlp_kind, recompute=recompute, dropout=False)
    an = Study(lower_layer(cfg), training="always", hardware=SELENE, dataflow=True).analysis
    rows = linear_rows(an)
    d = h // a
    want = {"qkv": 2 * b * s * h * (h + 2 * kv * d) // t, "proj": 2 * b * s * h * h // t,
            "fc1": 2 * b * s * h * f // t * (2 if mlp_kind == "swiglu" else 1), "fc2": 2 * b * s * f * h // t}
    for name, flops in want.items():
        for part in ("fprop", "dgrad", "wgrad"):
            got = sum(an.rows[i].gemm_flops for i in rows[f"{name}_{part}"])
            assert got == flops, (name, part)
    assert len(rows["fc2_wgrad"]) == len(rows["proj_wgrad"]) == 1


def test_no_gemm_exposes_every_chunk():
    """GEMMs of no time: each ring all_gather exposes its t - 1 steps, each pipelined reduce_scatter its 4
    chunks, each bulk collective all of it. Forward: 2 x 3 steps + 2 x 4 chunks; backward: 2 x 3 steps, 2 bulk
    all_gathers, 2 bulk reduce_scatters; per layer and micro-batch, 4 layers."""
    cfg = ScaleConfig(**BIG, t=4, sp=True, tp_comm_overlap=True)
    n = _net(4)
    it = compose(cfg, stub_cost(), SELENE)
    fwd = 2 * 3 * n["step"] + 2 * 4 * n["rs_chunk"]
    bwd = 2 * 3 * n["step"] + 2 * n["ag"] + 2 * n["rs"]
    assert it.tp_comm == pytest.approx(4 * (fwd + bwd), rel=1e-9)


def test_long_gemms_hide_all_but_the_last_reduce_scatter_chunk():
    """Every GEMM of 1 s, longer than its collective: the pipelined reduce_scatters' last chunks are left (2 a
    layer), their GEMMs on 108 - 16 SMs (1 s x 108 / 92), and each of the 4 bulk pairs of the backward exposes
    16/108 of its collective (the GEMM beside it on the SMs left: max(C, G + 16 C / 108) - G); with ring-exchange
    reduce_scatters (Megatron-Bridge's fp8 configurations: the copy engine, no SM) one step each instead."""
    cfg = ScaleConfig(**BIG, t=4, sp=True, tp_comm_overlap=True)
    n = _net(4)
    long = stub_cost(dict.fromkeys(LINEARS, 1.0))
    bulk = (2 * n["ag"] + 2 * n["rs"]) * UB / SMS
    want = 4 * (2 * (MARGIN - 1.0 + n["rs_chunk"]) + bulk)
    assert compose(cfg, long, SELENE).tp_comm == pytest.approx(want, rel=1e-9)
    ring = cfg.with_split(tp_overlap_rs="ring_exchange")
    assert compose(ring, long, SELENE).tp_comm == pytest.approx(4 * (2 * n["step"] + bulk), rel=1e-9)


def test_a_short_gemm_hides_part_of_each_step():
    """QKV's GEMM of G = 2 x t x step: each chunk of G/t covers its step twice (0 exposed); fc1's of G = t x step /
    2: each of the t - 1 steps exposes step / 2; proj's pipelined reduce_scatter with G = 4 x chunk / 2, run on
    92 of 108 SMs (G' = G x 108 / 92; G' - G exposed): 3 x (chunk - G'/4) + chunk; fc2 with G = 0: 4 chunks. The
    backward's GEMMs long: each bulk pair exposes 16/108 of its collective. Full recompute repeats the forward's
    exposure in the backward."""
    t = 4
    n = _net(t)
    g = {k: 1.0 for k in LINEARS if not k.endswith("fprop")}
    g.update(qkv_fprop=2 * t * n["step"], fc1_fprop=t * n["step"] / 2, proj_fprop=4 * n["rs_chunk"] / 2)
    cfg = ScaleConfig(**BIG, t=t, sp=True, tp_comm_overlap=True)
    proj = g["proj_fprop"] * MARGIN
    fwd = ((t - 1) * n["step"] / 2 + (proj - g["proj_fprop"]) + 3 * (n["rs_chunk"] - proj / 4) + n["rs_chunk"]
           + 4 * n["rs_chunk"])
    bulk = (2 * n["ag"] + 2 * n["rs"]) * UB / SMS
    it = compose(cfg, stub_cost(g), SELENE)
    assert it.layer["tp_forward"] == pytest.approx(fwd, rel=1e-9)
    assert it.layer["tp_backward"] == pytest.approx(bulk, rel=1e-9)
    full = compose(cfg.with_split(recompute="full"), stub_cost(g), SELENE)
    assert full.layer["tp_backward"] == pytest.approx(bulk + fwd, rel=1e-9)


def test_overlap_is_refused_under_inductor():
    """TE's userbuffer overlap runs in Transformer Engine's own modules, which Dynamo does not trace; no framework
    runs tp_comm_overlap under torch.compile: refused, as launch_blocking is."""
    cfg = ScaleConfig(**BIG, t=4, sp=True, tp_comm_overlap=True, attention="fused", execution="inductor")
    why = cfg.invalid()
    assert why is not None and "tp_comm_overlap" in why and "inductor" in why
    assert cfg.with_split(execution="compiled").invalid() is None


def test_overlap_needs_sequence_parallelism_and_names_itself():
    cfg = ScaleConfig(**BIG, t=4, tp_comm_overlap=True)
    assert "needs sequence parallelism" in cfg.invalid()
    assert ScaleConfig(**BIG, tp_comm_overlap=True).invalid() is None  # t = 1: nothing to overlap (NeMo turns it off)
    assert "tp_overlap_rs must be" in ScaleConfig(**BIG, tp_overlap_rs="bulk").invalid()
    on = cfg.with_split(sp=True)
    assert on.label().endswith("tp-overlap")
    assert on.with_split(tp_overlap_rs="ring_exchange").label().endswith("tp-overlap-rs-ring")
    off = compose(on.with_split(tp_comm_overlap=False), stub_cost(dict.fromkeys(LINEARS, 1.0)), SELENE)
    n = _net(4)
    assert off.tp_comm == pytest.approx(4 * (2 * n["ag"] + 2 * n["rs"] + 4 * n["ag"] + 2 * n["rs"]), rel=1e-9)


def test_chunks_on_several_streams_take_the_whole_gemm():
    """QKV's GEMM of 1 s runs as t = 4 chunks, each 0.3 s priced alone (1.2 s one after another), under the ring
    exchange; TE launches them on min(3, 4) = 3 compute streams in turn, each waiting only for its shard, so they run
    concurrently and take the whole GEMM's 1 s: nothing exposed from the chunking. The other GEMMs long and their
    chunks exact, so only the two pipelined reduce_scatters add: their last chunks, and their GEMMs on 92 of 108 SMs
    (16/92 s each)."""
    cfg = ScaleConfig(**BIG, t=4, sp=True, tp_comm_overlap=True)
    n = _net(4)
    lin = dict.fromkeys(LINEARS, 1.0) | {"qkv_fprop@4": 0.3}
    it = compose(cfg, stub_cost(lin), SELENE)
    assert it.layer["tp_forward"] == pytest.approx(2 * (MARGIN - 1.0 + n["rs_chunk"]), rel=1e-9)


@pytest.mark.parametrize("n, streams, want", [(4, 3, 1.0), (2, 3, 1.0), (4, 1, 4 * 0.3), (2, 1, 2 * 0.3)])
def test_chunked_seconds_serial_only_on_one_stream(n, streams, want):
    """A GEMM of 1 s as n chunks of 0.3 s each alone: on more than one stream (min(streams, n) > 1) the chunks share
    the SMs and take the whole GEMM's second; on one stream they run one after another, n x 0.3 s."""
    from mhlo_cost.studies.plan.tp_overlap import chunked_seconds

    assert chunked_seconds(1.0, 0.3, n, streams) == pytest.approx(want, rel=1e-12)


def test_a_chunk_of_the_lowered_layer_is_priced_on_its_own_shape():
    """Each chunk of s/t rows is priced on the GEMM model: t chunks take at least the whole GEMM (its wave
    quantization can only lose on fewer row tiles); every chunked GEMM has its chunk at t, the row-parallel forward
    GEMMs at NeMo's 4 splits too."""
    from mhlo_cost.studies.plan.tp_overlap import CHUNKED, linear_seconds

    cfg = ScaleConfig(layers=2, hidden=1024, heads=8, seq=512, vocab=128, t=2, sp=True, micro_batch=2,
                      global_batch=2, dropout=False)
    st = Study(lower_layer(cfg), training="always", hardware=SELENE, dataflow=True)
    lin = linear_seconds(st.analysis, st.roofline.times, SELENE, cfg.t)
    for name in CHUNKED:
        assert 2 * lin[f"{name}@2"] >= lin[name] * (1 - 1e-9), name
    assert set(lin) >= {f"{name}@2" for name in CHUNKED} | {"proj_fprop@4", "fc2_fprop@4"}


ARGS = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128", "-t", "2"]


@pytest.mark.parametrize("extra,says", [
    (["--tp-comm-overlap"], "needs sequence parallelism"),
    (["--layers", "5", "--interleave", "2", "-p", "2", "--decoder-first-pipeline-num-layers", "3", "--global-batch",
      "2"], "first stage's 3 layers must be divisible by the interleave degree 2"),
])
def test_the_command_line_refuses_in_one_line(capsys, extra, says):
    from mhlo_cost.cli import main

    assert main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error:") and says in err and err.count("\n") == 1


def test_the_command_line_takes_the_overlap_and_the_split_rule(capsys, tmp_path, monkeypatch):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(ARGS + ["--sp", "--tp-comm-overlap", "--tp-comm-overlap-rs", "ring_exchange"]) == 0
    assert "tp-overlap-rs-ring" in capsys.readouterr().out
    assert main(ARGS + ["--layers", "3", "-p", "2", "--interleave", "2", "--global-batch", "2",
                        "--decoder-first-pipeline-num-layers", "1", "--pipeline-split", "torchtitan"]) == 2
    assert "cannot hold 2 model chunks" in capsys.readouterr().err

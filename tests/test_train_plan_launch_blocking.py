"""CUDA_LAUNCH_BLOCKING=1 in train-plan (``launch_blocking``, :mod:`mhlo_cost.studies.plan.launch_blocking`): each
framework call's host time in series with its kernel, checked against closed forms worked out here."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")

from mhlo_cost.cli import main
from mhlo_cost.network import resolve_profile
from mhlo_cost.roofline.eager_host import DISPATCH_S
from mhlo_cost.studies.plan import launch_blocking as lb
from mhlo_cost.studies.plan.compose import compose
from mhlo_cost.studies.plan.config import ScaleConfig
from plan_stubs import stub_cost

SELENE = resolve_profile("selene")
TINY = dict(layers=4, hidden=64, heads=4, seq=32, vocab=128)


def test_every_call_adds_its_host_time_in_every_slot(monkeypatch):
    """Two stages of 2 layers, 8 micro-batches, no tensor or data parallelism; a layer of 10 forward and 20 backward
    calls and 4 parameter tensors. Per micro-batch each stage makes 2 x 10 + 1 forward calls (the first stage's send,
    the last's receive) and 2 x 20 + 1 backward ones: 62 calls of 8 us in each of the m + p - 1 = 9 slots. The step:
    the first stage's 2 x 4 + 1 (word embedding) = 9 tensors, 2 norm calls each + 3, one Adam launch and its 2 groups'
    calls, a copy and a zero_ a group: 18 + 3 + 3 + 2 + 2 = 28 calls, once an iteration."""
    monkeypatch.setattr(lb, "layer_calls", lambda cfg, head=True: lb.Calls(10, 20, 0, 4))
    cfg = ScaleConfig(**TINY, p=2, global_batch=8)
    cost = stub_cost(forward=1e-3, backward=2e-3)
    base, more = compose(cfg, cost, SELENE), compose(cfg.with_split(launch_blocking=True), cost, SELENE)
    per_slot = 62 * DISPATCH_S
    assert SELENE.dispatch_overhead is None  # (the eager model's 8 us a call)
    assert more.total - base.total == pytest.approx(9 * per_slot + 28 * DISPATCH_S, rel=1e-12)
    assert more.launch_host == pytest.approx(8 * per_slot, rel=1e-12)
    assert more.bubble - base.bubble == pytest.approx(1 * per_slot, rel=1e-12)
    assert more.optimizer - base.optimizer == pytest.approx(28 * DISPATCH_S, rel=1e-12)
    assert [s["launch_calls"] for s in more.stages] == [(21, 41, 28), (21, 41, 2 * 8 + 3 + 3 + 2 + 2)]


def test_collectives_transfers_head_and_accumulation_are_calls():
    """A middle stage with t = 2, full recompute, DeepSpeed's scatter/gather and its BF16 optimizer's accumulation:
    per layer 2 all_reduces forward and 2 + 2 backward; each transfer a call, the receiver's all_gather one more; 3
    calls per parameter tensor after the backward. The last stage adds its head's calls and parameter tensors."""
    calls = lb.Calls(forward=30, backward=50, recompute=30, params=12, head_forward=7, head_backward=9, head_params=3)
    cfg = ScaleConfig(**TINY, t=2, p=4, d=2, global_batch=8, recompute="full", scatter_gather=True,
                      grad_accum_pass=True)
    tp = {"forward": (("all_reduce", 2),), "backward": (("all_reduce", 2), ("all_reduce", 2))}
    f, b = lb.micro_batch_calls(cfg, calls, 3, first=False, last=False, tp=tp)
    assert f == 3 * (30 + 2) + (1 + 1) + 1  # receive + gather, send
    assert b == 3 * (50 + 30 + 4) + (1 + 1) + 1 + 3 * 3 * 12
    f, b = lb.micro_batch_calls(cfg, calls, 3, first=False, last=True, tp=tp)
    assert f == 3 * (30 + 2) + 7 + 2
    assert b == 3 * (50 + 30 + 4) + 9 + 1 + 3 * (3 * 12 + 3)


def test_step_calls_with_data_parallel_buckets():
    """d = 8, ZeRO 1 (sharded 8 ways): 1.2e9 weight elements on a stage of 10 layers of 12 tensors. Norms 2 x 120 + 3;
    Adam over the 1.5e8-element shard, 65,536 x 320 elements a launch: ceil(1.5e8 / 20,971,520) = 8 launches + 2;
    copy_ and all_gather for 2 groups: 4; zero_: 2; the reduction: DeepSpeed's allreduce_no_retain never splits a
    tensor and the BF16 optimizer hands it its 2 flat fp32 group buffers: 2 buckets (not ceil(1.2e9 / 5e8) = 3),
    4 calls each."""
    cfg = ScaleConfig(**TINY, d=8, global_batch=8, zero=1)
    n = lb.step_calls(cfg, lb.Calls(1, 1, 0, 12), 10, first=False, last=False, elems=1_200_000_000)
    assert n == (2 * 120 + 3) + (8 + 2) + 4 + 2 + 4 * 2


def test_program_calls_one_per_call_site():
    """A program of four jnp calls on four lines (a multiply; sin; a reshape, a view call; exp), as the eager model
    groups them: four calls, all of the forward."""
    import jax
    import jax.numpy as jnp

    from mhlo_cost.studies.study import Study

    def f(params, x):
        y = params * x
        y = jnp.sin(y)
        z = y.reshape(4, 2)
        return jnp.exp(z)

    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    text = jax.jit(f).lower(spec, spec).as_text(debug_info=True)
    a = Study(text, training="always").analysis
    calls, _ = lb.program_calls(a)
    assert calls == {"forward": 4}


@pytest.mark.parametrize("kw, why", [
    (dict(execution="eager", attention="fused"), "compiled execution"),
    (dict(dp_overlap=True, d=2, global_batch=2), "cannot overlap"),
    (dict(ddp="megatron", dp_overlap=True, d=2, global_batch=2, zero=1), "cannot overlap"),
    (dict(tp_comm_overlap=True, t=2, sp=True), "cannot overlap"),
    (dict(experts=4, top_k=2, expert_ffn=128, shared_experts=1), "experts"),
    (dict(zero=3, d=4, global_batch=4), "FSDP"),
    (dict(zero=3, d=4, dp_shard=2, global_batch=4), "dp_shard"),
    (dict(cp=2), "cp > 1"),
])
def test_refused_where_it_cannot_be_priced(kw, why):
    """Each plan whose collectives are priced overlapped (or not priced for the flag) is refused with the flag, and
    runs without it (so the refusal is the flag's, not another check's)."""
    assert ScaleConfig(**TINY, **kw).invalid() is None
    why_not = ScaleConfig(**TINY, launch_blocking=True, **kw).invalid()
    assert why_not is not None and "launch_blocking" in why_not and why in why_not


def test_flag_off_is_the_plan_without_the_field():
    """launch_blocking=False gives the plan made without the field, field by field: the iteration's every field, the
    row, the breakdown and the stage table (no host column, no launch_host_s)."""
    import dataclasses

    from mhlo_cost.studies.plan.plan import breakdown_frame, plan
    from mhlo_cost.studies.plan.stages import COMPONENTS, stage_frame

    kw = dict(TINY, t=2, p=2, d=2, global_batch=8)
    a, b = plan(ScaleConfig(**kw), SELENE), plan(ScaleConfig(**kw, launch_blocking=False), SELENE)
    for f in dataclasses.fields(a.iteration):
        assert getattr(a.iteration, f.name) == getattr(b.iteration, f.name), f.name
    assert a.iteration.launch_host == 0.0 and "launch_host_s" not in b.row(every=True)
    assert a.row(every=True) == b.row(every=True) and a.memory == b.memory
    assert breakdown_frame(a).equals(breakdown_frame(b)) and stage_frame(a).equals(stage_frame(b))
    assert [c for c in stage_frame(b).columns if c.endswith("_s")] == [k + "_s" for k in (*COMPONENTS, "iteration")]


def test_stage_rows_add_up_with_the_flag():
    """-t 2 -p 2 -d 2 with the flag: each stage's components, host among them, add up to the iteration; the slow
    stage's host column is the breakdown's host (launch blocking) line, and every stage has host time."""
    from mhlo_cost.studies.plan.plan import breakdown_frame, plan
    from mhlo_cost.studies.plan.stages import components, stage_rows

    cfg = ScaleConfig(**TINY, t=2, p=2, d=2, global_batch=8, launch_blocking=True)
    pl = plan(cfg, SELENE)
    rows, it = stage_rows(pl), pl.iteration
    assert "host" in components(cfg)
    for r in rows:
        assert r["host"] > 0
        assert sum(r[k] for k in components(cfg)) == pytest.approx(it.total, rel=1e-12)
    assert rows[it.layer["slow_stage"]]["host"] == pytest.approx(it.launch_host, rel=1e-12)
    df = breakdown_frame(pl)
    assert float(df.loc[df.component == "host (launch blocking)", "seconds"].iloc[0]) == round(it.launch_host, 6)


def test_cli_option_and_its_refusal(tmp_path, capsys):
    argv = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
            "-p", "2", "--cache-dir", str(tmp_path), "--launch-blocking"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "launch-blocking" in out and "host (launch blocking)" in out
    assert main([*argv, "--dp-overlap"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error:") and "launch_blocking" in err[0]


def test_both_bloom_rows_run_with_the_flag():
    """The data file's BLOOM rows (its training script exports CUDA_LAUNCH_BLOCKING=1) reach the configuration with
    launch_blocking, and only they: no other source's script sets it."""
    from helpers import script

    vt = script("benchmarks/validate_training.py")
    data = vt.load()
    flagged = {r["id"] for r in data["run"]
               if vt.scale_config(r, data["model"][r["model"]]).launch_blocking}
    assert flagged == {"bloom2022/gbs2048", "bloom2022/gbs16"}


def test_optimization_barrier_is_no_call():
    """JAX's remat puts an optimization_barrier in the backward (no framework call): the calls are the eager model's
    groups of the program less the groups made of barriers only, and the program has at least one."""
    import jax
    import jax.numpy as jnp

    from mhlo_cost.roofline.eager_calls import groups
    from mhlo_cost.studies.study import Study

    def loss(params, x):
        return jnp.sum(jax.checkpoint(lambda p, y: jnp.sin(p * y))(params, x))

    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    text = jax.jit(jax.grad(loss)).lower(spec, spec).as_text(debug_info=True)
    a = Study(text, training="always").analysis
    every = groups(a.rows, None, set())
    barrier = [g for g in every if all(a.rows[i].op.endswith("optimization_barrier") for i in g)]
    assert barrier
    calls, _ = lb.program_calls(a)
    assert sum(calls.values()) == sum(a.rows[g[0]].multiplicity for g in every) - sum(
        a.rows[g[0]].multiplicity for g in barrier)

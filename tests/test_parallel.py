"""STDiT3 under parallel strategies (mhlo_cost/lower/models/parallel.py): same function, explicit collectives.

* equivalence: every strategy runs a small model on 4 or 8 host devices with random weights and matches
  the unsharded forward (float32). The devices must exist before jax starts, so these runs happen in one
  subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (this file, run as a script);
* per-block collective bytes of the lowered IR (abstract mesh: no devices) against the closed forms of
  ``stdit3_formula.comm_bytes``, written independently of the model code;
* the Megatron acceptance figure at full size (204_640_360, 16 devices, bf16): 80,123,904,000 bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from stdit3_formula import comm_bytes  # noqa: E402

from mhlo_cost import analyze  # noqa: E402
from mhlo_cost.lower.models import parallel  # noqa: E402
from mhlo_cost.lower.models.config import STDiT3Config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: small configuration whose dims divide by 4 and 8: hidden 64, 8 heads of 8, MLP 256, T=3, S=12, B=2
SMALL8 = replace(STDiT3Config().small(), heads=8)

#: (strategy, devices, mesh) run on host devices; ulysses / ring on 8 devices pad S=12 up to 16
EQUIV_CASES = [
    ("megatron", 8, None),
    ("2d", 8, (2, 4)),
    ("ulysses", 8, None),
    ("ulysses", 4, None),
    ("ring", 8, None),
    ("ring", 4, None),
]


def _case_id(case) -> str:
    strategy, devices, mesh = case
    return f"{strategy}-{'x'.join(map(str, mesh)) if mesh else devices}"


# ---------------------------------------------------------------------------------------------------------
# Equivalence with the unsharded model (subprocess with 8 host devices)
# ---------------------------------------------------------------------------------------------------------


def _equivalence_worker() -> None:
    """Run every case of EQUIV_CASES against the unsharded forward; print {case id: relative error}."""
    import jax
    import numpy as np

    from mhlo_cost.lower.models import stdit3

    cfg = replace(SMALL8, depth=1)  # one spatial and one temporal block
    params = stdit3.init_params(cfg, 0)
    rng = np.random.default_rng(0)
    x, _, y, _ = stdit3.input_shapes(cfg)
    inputs = (rng.standard_normal(x.shape).astype(np.float32), np.array([10.0, 500.0], np.float32),
              rng.standard_normal(y.shape).astype(np.float32), np.array([24.0, 24.0], np.float32))
    out = {"devices": jax.device_count()}
    with jax.default_matmul_precision("highest"):
        ref = np.asarray(jax.jit(stdit3.make_forward(cfg))(params, *inputs))
        for case in EQUIV_CASES:
            strategy, devices, mesh = case
            plan = parallel.make_plan(strategy, devices, mesh, cfg)
            fwd = jax.jit(parallel.make_parallel_forward(cfg, plan, parallel.device_mesh(plan)))
            got = np.asarray(fwd(params, *inputs))
            assert got.shape == ref.shape, (got.shape, ref.shape)
            out[_case_id(case)] = float(np.abs(got - ref).max() / np.abs(ref).max())
    print("RESULT " + json.dumps(out))


@pytest.fixture(scope="module")
def equivalence():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--equivalence-worker"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("case", EQUIV_CASES, ids=_case_id)
def test_same_function_as_unsharded(equivalence, case):
    assert equivalence["devices"] >= 8
    err = equivalence[_case_id(case)]
    assert err < 1e-4, err


# ---------------------------------------------------------------------------------------------------------
# Collective volumes from the IR against the closed forms
# ---------------------------------------------------------------------------------------------------------

#: (strategy, mesh) lowered on an abstract mesh; bf16 so that element size 2 is exercised too
COMM_CASES = [
    ("megatron", (4,)),
    ("megatron", (8,)),
    ("2d", (2, 4)),
    ("ulysses", (4,)),
    ("ulysses", (8,)),  # S = 12 padded to 16
    ("ring", (4,)),
    ("ring", (8,)),
]

#: where each strategy's collectives sit inside a block: {(block kind, sub-scope)}
EXPECTED_SCOPES = {
    "megatron": {(k, s) for k in ("spatial", "temporal") for s in ("attn", "cross_attn", "mlp")},
    "2d": {(k, s) for k in ("spatial", "temporal") for s in ("attn", "cross_attn", "mlp")},
    "ulysses": {("spatial", "attn")},
    "ring": {("spatial", "attn")},
}


def _lower_text(cfg, strategy, mesh):
    devices = mesh[0] * (mesh[1] if len(mesh) > 1 else 1)
    plan = parallel.make_plan(strategy, devices, mesh if strategy == "2d" else None, cfg)
    return parallel.lower(cfg, plan).as_text(debug_info=True)


def _collectives(text):
    ops = analyze(text).ops
    col = ops[ops["kind"] == "collective"]
    return col.assign(first=col["scope"].str.split("/").str[0], second=col["scope"].str.split("/").str[1])


@pytest.mark.parametrize("strategy,mesh", COMM_CASES, ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_comm_per_block_matches_closed_form(strategy, mesh):
    cfg = replace(SMALL8, dtype="bfloat16")
    want = comm_bytes(cfg, strategy, mesh)
    col = _collectives(_lower_text(cfg, strategy, mesh))
    per = col.groupby("first")["comm_bytes"].sum()
    for i in range(cfg.depth):
        assert per.get(f"spatial_blocks.{i}", 0) == want["spatial_block"], i
        assert per.get(f"temporal_blocks.{i}", 0) == want["temporal_block"], i
        for kind, counts in (("spatial", want["spatial_counts"]), ("temporal", want["temporal_counts"])):
            rows = col[col["first"] == f"{kind}_blocks.{i}"]
            assert rows["comm_kind"].value_counts().to_dict() == counts, (kind, i)
    assert per.get("final_layer", 0) == want["final_layer"]
    outside = set(per.index) - {f"{k}_blocks.{i}" for k in ("spatial", "temporal") for i in range(cfg.depth)}
    assert outside <= {"final_layer"}, outside
    assert col["comm_bytes"].sum() == want["total"]
    # every collective sits in the sub-scope of the block it belongs to
    in_blocks = col[col["first"].str.contains("_blocks.")]
    where = {(f.split("_blocks.")[0], s) for f, s in zip(in_blocks["first"], in_blocks["second"])}
    assert where == EXPECTED_SCOPES[strategy]


def test_collectives_keep_scope_names_in_text():
    """The locations of the lowered text (debug_info) carry the block scopes on the collectives."""
    text = _lower_text(SMALL8, "megatron", (4,))
    assert "stablehlo.all_reduce" in text
    assert 'loc("spatial_blocks.1/attn/psum"' in text or '"spatial_blocks.1/attn/psum"' in text
    text = _lower_text(SMALL8, "ring", (4,))
    assert '"spatial_blocks.0/attn/ppermute"' in text
    text = _lower_text(SMALL8, "ulysses", (4,))
    assert '"spatial_blocks.0/attn/all_to_all"' in text
    text = _lower_text(SMALL8, "2d", (2, 2))
    assert '"temporal_blocks.1/mlp/reduce_scatter"' in text and '"temporal_blocks.1/mlp/all_gather"' in text


def test_megatron_acceptance_full_size():
    """204_640_360, 16 devices, bf16: the block pairs' all_reduce volume is 6 * 2(n-1)/n * B*T*S*h*2 * 28."""
    cfg = STDiT3Config().with_shape("204_640_360")
    assert (cfg.batch, cfg.tokens_t, cfg.tokens_s, cfg.hidden, cfg.depth, cfg.dtype) == (2, 60, 920, 1152, 28,
                                                                                            "bfloat16")
    expected = 6 * 2 * 15 * (2 * 60 * 920 * 1152 * 2) // 16 * 28
    assert expected == 80_123_904_000  # 80.124 GB (decimal)
    col = _collectives(_lower_text(cfg, "megatron", (16,)))
    blocks = col[col["first"].str.startswith("spatial_blocks.") | col["first"].str.startswith("temporal_blocks.")]
    assert set(blocks["comm_kind"]) == {"all_reduce"}
    assert set(blocks["group_size"]) == {16}
    assert len(blocks) == 6 * 28
    assert blocks["comm_bytes"].sum() == expected
    # embedders and the final layer run replicated: nothing outside the blocks
    assert col["comm_bytes"].sum() == expected


# ---------------------------------------------------------------------------------------------------------
# Plans and the frontend
# ---------------------------------------------------------------------------------------------------------


def test_plans_and_errors():
    assert parallel.STRATEGIES == ("none", "megatron", "2d", "ulysses", "ring")
    p = parallel.make_plan("2d", 16)
    assert (p.mesh_shape, p.axis_names, p.devices) == ((2, 8), ("x", "y"), 16)
    assert parallel.make_plan("2d", 8, "2x4").mesh_shape == (2, 4)
    assert parallel.make_plan("ring", 16).axis_names == ("sp",)
    full = STDiT3Config()
    for strategy in ("megatron", "ulysses", "ring"):
        parallel.make_plan(strategy, 16, cfg=full)
    parallel.make_plan("2d", 16, (2, 8), cfg=full)
    with pytest.raises(ValueError, match="heads"):
        parallel.make_plan("megatron", 32, cfg=full)
    with pytest.raises(ValueError, match="heads"):
        parallel.make_plan("ulysses", 32, cfg=full)
    with pytest.raises(ValueError, match="batch"):
        parallel.make_plan("2d", 16, (4, 4), cfg=full)
    with pytest.raises(ValueError, match="devices"):
        parallel.make_plan("2d", 16, (2, 4))
    with pytest.raises(ValueError, match="unknown"):
        parallel.make_plan("pipeline", 4)
    with pytest.raises(ValueError, match="2d"):
        parallel.make_plan("megatron", 4, (2, 2))
    with pytest.raises(ValueError, match="NXxNY"):
        parallel.parse_mesh("2*8")


def test_jax_frontend_lowers_a_sharded_config():
    from mhlo_cost.lower.frontends import FrontendError, jax_frontend

    plan = parallel.make_plan("megatron", 4, cfg=SMALL8)
    low = jax_frontend.lower("stdit3", parallel.ShardedConfig(SMALL8, plan))
    assert "stablehlo.all_reduce" in low.text and low.info["parallel"].startswith("megatron over 4")
    assert "stablehlo.all_reduce" not in jax_frontend.lower("stdit3", SMALL8).text
    bare = jax_frontend.lower("stdit3", parallel.ShardedConfig(SMALL8, plan), locations=False).text
    assert jax_frontend.lower("stdit3", SMALL8, plan=plan, locations=False).text == bare
    with pytest.raises(FrontendError, match="stdit3 only"):
        jax_frontend.lower("gpt", None, plan=plan)


if __name__ == "__main__" and sys.argv[1:] == ["--equivalence-worker"]:
    _equivalence_worker()

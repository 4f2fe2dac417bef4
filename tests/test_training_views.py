"""Training steps on the command line (report --by phase, blocks with phase columns), STDiT3's step (JAX
and torchax against each other and the closed forms), and the lowering entry point's errors."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from mhlo_cost.cli import main
from mhlo_cost.lower.models.config import STDiT3Config
from mhlo_cost.lower.models.gpt import GPTConfig
from mhlo_cost.lower.training import lower_train_step

GPT = GPTConfig(vocab=128, hidden=64, heads=2, layers=2, seq=16, batch=2, dtype="float32")
ST = STDiT3Config().small()


@pytest.fixture(scope="module")
def gpt_step(tmp_path_factory):
    p = tmp_path_factory.mktemp("train") / "gpt_train.mlir"
    p.write_text(lower_train_step("gpt", GPT, remat="block").text)
    return p


@pytest.fixture(scope="module")
def stdit3_steps():
    return {r: lower_train_step("stdit3", ST, remat=r).text for r in ("none", "block")}


def test_report_by_phase_json(gpt_step, capsys):
    assert main(["report", str(gpt_step), "--by", "phase", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["phase"]: r for r in data["rows"]}
    assert list(rows) == ["forward", "backward/dgrad", "backward/wgrad", "backward/other", "recompute", "optimizer",
                          "TOTAL"]
    assert rows["TOTAL"]["gemm_flops"] == data["summary"]["gemm_flops"]
    assert sum(r["vector_flops"] for k, r in rows.items() if k != "TOTAL") == data["summary"]["vector_flops"]
    fwd, bwd = rows["forward"]["gemm_flops"], rows["backward/dgrad"]["gemm_flops"] + rows["backward/wgrad"]["gemm_flops"]
    assert bwd == 2 * fwd
    facts = data["phases"]
    assert facts["training"] and facts["rule_of_thumb"]["model_flops"] == fwd + bwd
    assert facts["rule_of_thumb"]["hardware_flops"] == fwd + bwd + rows["recompute"]["gemm_flops"]


def test_report_by_phase_table_has_the_rule_of_thumb(gpt_step, capsys):
    assert main(["report", str(gpt_step), "--by", "phase", "--unit", "M"]) == 0
    out = capsys.readouterr().out
    assert "rule of thumb 6 x N x D" in out and "backward / forward matrix FLOPs: 2.000" in out


def test_blocks_csv_has_phase_columns_and_the_optimizer_row(gpt_step, capsys):
    assert main(["blocks", str(gpt_step)]) == 0
    df = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert {"fwd_gemm_flops", "bwd_gemm_flops", "dgrad_gemm_flops", "wgrad_gemm_flops", "recompute_gemm_flops",
            "opt_vector_flops", "bwd_fwd_ratio"} <= set(df.columns)
    b = df.set_index("block")
    assert b.loc["optimizer", "opt_vector_flops"] == b.loc["TOTAL", "opt_vector_flops"] > 0
    for i in range(GPT.layers):
        assert b.loc[f"layers.{i}", "bwd_fwd_ratio"] == 2.0
    total = b.loc["TOTAL"]
    assert total["fwd_gemm_flops"] + total["bwd_gemm_flops"] + total["recompute_gemm_flops"] == total["gemm_flops"]


def test_blocks_parts_split_the_phases(gpt_step, capsys):
    assert main(["blocks", str(gpt_step), "--parts"]) == 0
    df = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    mlp = df[(df.block == "layers.0") & (df.part == "mlp")].iloc[0]
    c, n = GPT.hidden, GPT.batch * GPT.seq
    assert mlp["fwd_gemm_flops"] == 2 * n * c * 4 * c * 2  # fc1 + fc2
    assert mlp["recompute_gemm_flops"] == 2 * n * c * 4 * c  # fc1 only: fc2's output is not read back


def test_inference_blocks_unchanged(tmp_path, capsys):
    from mhlo_cost.lower.frontends import lower

    p = tmp_path / "gpt.mlir"
    p.write_text(lower("jax", "gpt", GPT).text)
    assert main(["blocks", str(p)]) == 0
    cols = capsys.readouterr().out.splitlines()[0].split(",")
    assert not any(c.startswith(("fwd_", "bwd_")) for c in cols)
    assert main(["report", str(p), "--by", "phase"]) == 0
    assert "no backward in the op locations" in capsys.readouterr().out


def test_stdit3_step_per_block(stdit3_steps):
    from mhlo_cost.analysis.blocks import add_phase_columns, block_table, training_blocks
    from mhlo_cost.analysis.collectors import assign_blocks
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from tests.stdit3_formula import gemm_flops

    frames = {}
    for remat, text in stdit3_steps.items():
        a = analyze(text, AnalysisOptions(phases=True))
        blocks = training_blocks(assign_blocks(a), a.phases)
        frames[remat] = add_phase_columns(block_table(a, blocks), a, blocks, a.phases).set_index("block")
    for kind in ("spatial", "temporal"):
        fwd = gemm_flops(ST)[f"{kind}_block"]
        for remat, df in frames.items():
            row = df.loc[f"{kind}_blocks.0"]
            assert row["fwd_gemm_flops"] == fwd
            assert row["bwd_gemm_flops"] == 2 * fwd
            # a block's last product (fc2) is scaled by its gate: its output is read back, so all is recomputed
            assert row["recompute_gemm_flops"] == (fwd if remat == "block" else 0)
    t = frames["none"].loc["t_embedder"]
    c, f, b = ST.hidden, ST.freq_dim, ST.batch
    assert t["fwd_gemm_flops"] == 2 * b * f * c + 2 * b * c * c
    assert t["dgrad_gemm_flops"] == 2 * b * c * c  # no gradient for the sinusoidal embedding: fc1 has no dgrad
    x = frames["none"].loc["x_embedder"]
    assert x["wgrad_conv_flops"] == x["fwd_conv_flops"] > 0 and x["dgrad_conv_flops"] == 0


def test_stdit3_step_torchax_equals_jax(stdit3_steps):
    import importlib.util

    if importlib.util.find_spec("torchax") is None:  # imported through mhlo_cost's shim, never directly
        pytest.skip("torchax is not installed")
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.analysis.training import phase_frame

    tx = lower_train_step("stdit3", ST, frontend="torchax")
    frames = [phase_frame(analyze(t, AnalysisOptions(phases=True))).set_index("phase")
              for t in (tx.text, stdit3_steps["none"])]
    for k in ("forward", "backward/dgrad", "backward/wgrad"):
        for m in ("gemm_flops", "conv_flops"):
            assert frames[0].loc[k, m] == frames[1].loc[k, m]
    assert frames[0].loc["optimizer", "vector_flops"] == frames[1].loc["optimizer", "vector_flops"]


def test_lower_train_writes_and_refuses(tmp_path, capsys):
    """`mhlo-cost lower --train`: a GPT step whose backward is 2 x its forward (every product's input
    needs a gradient, the closed form of a dense stack), and one-line refusals."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.analysis.training import phase_frame

    out = tmp_path / "t.mlir"
    p = subprocess.run([sys.executable, "-m", "mhlo_cost", "lower", "--model", "gpt", "--layers", "1", "--hidden",
                        "32", "--heads", "2", "--train", "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "training step (adamw, remat none)" in p.stderr and "module @jit_train_step" in out.read_text()
    a = analyze(str(out), AnalysisOptions(phases=True))
    df = phase_frame(a).set_index("phase")
    fwd = df.loc["forward", "gemm_flops"]
    assert df.loc["backward/dgrad", "gemm_flops"] + df.loc["backward/wgrad", "gemm_flops"] == 2 * fwd
    notes = out.with_name("notes.mlir")
    notes.write_text("not IR: lower replaces only the IR it wrote\n")
    for args, msg in [(("--model", "gpt", "--train", "-o", notes), "exists"),
                      (("--model", "gpt", "--remat", "block"), "go(es) with --train"),
                      (("--model", "gpt", "--train", "--remat", "all"), "invalid choice"),
                      (("--model", "stdit3", "--small", "--parallel", "megatron", "--devices", "4", "--train"),
                       "drop --parallel"),
                      (("--hf", "GPT2Model", "--train"), "no input was given"),  # a library model takes --train
                      (("--hf", "GPT2Model", "--train", "--remat", "block"), "checkpoint your own"),
                      (("--module", "nope.nothing:make", "--input-shape", "2,3", "--train"), "nope")]:
        rc = main(["lower", "-q", *map(str, args)])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err and "Traceback" not in err, err

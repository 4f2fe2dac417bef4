"""``train-plan --hf CLASS --precision fp8-…``: the per-device layer lowered from a Llama-family transformers
configuration (grouped-query q/k/v, the SwiGLU gate, up and down) under the fp8 training recipes. Closed forms worked
out here from the configuration's sizes: the fp8 FLOPs of a layer (forward, dgrad and wgrad of every linear), the
bytes of the fp8 weight copies the step makes, and the widths the plan's memory keeps."""
from __future__ import annotations

import pytest

pytest.importorskip("optax")
pytest.importorskip("transformers")

from mhlo_cost import analyze
from mhlo_cost.analysis import AnalysisOptions

H, HEADS, KV, FFN, SEQ, MB = 256, 8, 2, 704, 64, 2
D = H // HEADS
SETS = {"num_hidden_layers": 2, "hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": KV,
        "intermediate_size": FFN, "vocab_size": 512}
#: (in, out) of a Llama layer's linears: the fused q/k/v (grouped-query: KV key and value heads), o, gate, up, down
LINEARS = ((H, (HEADS + 2 * KV) * D), (H, H), (H, FFN), (H, FFN), (FFN, H))


def _cfg(precision: str, recompute: str = "none"):
    from mhlo_cost.studies.plan.hf import hf_scale_config

    base = hf_scale_config("LlamaForCausalLM", "llama", SETS, SEQ)
    return base.with_split(micro_batch=MB, global_batch=MB, recompute=recompute, precision=precision)


def _layer(precision: str, recompute: str = "none", **kw):
    from mhlo_cost.studies.plan.layer import lower_layer

    return analyze(lower_layer(_cfg(precision, recompute)), AnalysisOptions(**kw) if kw else None)


def _fp8_weight_copies(a) -> int:
    """Bytes of the converts that make an e4m3 copy of a weight (a 2-D result of a weight's shape)."""
    shapes = set(LINEARS)
    return sum(r.result.nbytes * r.multiplicity for r in a.rows if r.op.endswith("convert")
               and not isinstance(r.result, tuple) and r.result.dtype.lower().startswith("f8e4m3")
               and tuple(r.result.shape) in shapes)


@pytest.mark.parametrize("precision", ["fp8-rowwise", "fp8-tensorwise"])
def test_fp8_flops_of_a_llama_layer_are_its_linears_three_gemms(precision):
    a = _layer(precision)
    m = MB * SEQ
    linears = sum(2 * m * i * o for i, o in LINEARS)
    assert a.summary["gemm_flops_fp8"] == 3 * linears  # forward, dgrad, wgrad
    bf16 = _layer("bf16")
    assert a.summary["gemm_flops"] == bf16.summary["gemm_flops"] and "gemm_flops_fp8" not in bf16.summary


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_fp8_weight_copies_are_made_at_each_use(recompute):
    """Each weight is cast to e4m3 for the forward and again for the dgrad, one byte an element each time; under full
    recompute once more for the recomputed forward, but for the down projection, whose output the backward never
    reads (it only feeds the layer's output). The weights stay bf16 arguments and the master weights float32."""
    a = _layer("fp8-rowwise", recompute, arguments=True)
    elems = sum(i * o for i, o in LINEARS)
    assert _fp8_weight_copies(a) == 2 * elems + (elems - FFN * H if recompute == "full" else 0)
    by = {}
    for arg in a.arguments:
        if arg.type.shape and tuple(arg.type.shape) in set(LINEARS):
            root = arg.name.split("[")[0]
            by[root] = by.get(root, 0) + arg.type.nbytes
    assert by["params"] == 2 * elems and by["master"] == 4 * elems


def test_the_plan_keeps_bf16_widths_and_says_which():
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.plan import facts, plan

    hw = resolve_profile("dgx-h100")
    fp8, bf16 = plan(_cfg("fp8-rowwise"), hw), plan(_cfg("bf16"), hw)
    for k in ("weights", "gradients", "optimizer_state"):
        assert fp8.memory[k] == bf16.memory[k], k
    line = next(f for f in facts(fp8) if f.startswith("precision fp8-rowwise"))
    assert "weights bf16, gradients float32, master weights and AdamW's two moments float32" in line
    assert not any(f.startswith("precision") for f in facts(bf16))


HF = ["train-plan", "--hf", "LlamaForCausalLM", "--config", "llama", *[a for k, v in SETS.items()
                                                                       for a in ("--set", f"{k}={v}")],
      "--seq", str(SEQ), "--hardware", "dgx-h100", "--no-cache"]


def test_cli_takes_the_training_recipes_with_hf(capsys, tmp_path, monkeypatch):
    import json

    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main([*HF, "--precision", "fp8-tensorwise", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["precision"] == "fp8-tensorwise"


@pytest.mark.parametrize("bad, words", [("fp9", "unknown recipe (known: bf16, fp8-tensorwise, fp8-rowwise"),
                                        ("nvfp4", "a training step runs bf16, fp8-tensorwise, fp8-rowwise")])
def test_cli_refuses_other_recipes_with_hf_in_one_line(capsys, tmp_path, monkeypatch, bad, words):
    from mhlo_cost.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main([*HF, "--precision", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error: --precision") and words in err[0]

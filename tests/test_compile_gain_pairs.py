"""The compile-gain validation's pairs (issue 35, done-when 3): benchmarks/validate_compile_gain.py makes its
whole-model pairs from benchmarks/data/published_models.toml (an eager and an Inductor row of one program, chip,
torch release and publisher) and keeps in published_compile_gain.toml only the pairs that are no such rows, so
that each measured number is typed once. Nothing here prices a model (no lowering, no timing)."""
from __future__ import annotations

import os
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import validate_compile_gain as vcg  # noqa: E402

with open(vcg.MODELS, "rb") as _f:
    ROWS = tomllib.load(_f)["m"]
with open(vcg.DATA, "rb") as _f:
    OWN = tomllib.load(_f)["pair"]
PAIRS = vcg.model_pairs(ROWS)

TIMM = "https://github.com/huggingface/pytorch-image-models/blob/90cae8c5ab83d2d7e23b1fb2bab1559bfdcbc7e9/"


def _row(**kw):
    m = {"id": "x-eager-b1", "program": "hf", "chip": "a100", "execution": "eager", "unit": "ms", "measured": 2.0,
         "params": {"hf": "ViTForImageClassification", "batch": 1, "image": 224, "dtype": "float32"},
         "source": TIMM + "results/a.csv"}
    return {**m, **kw}


def test_every_published_pair_of_the_two_sources_is_made():
    # the transformers guide: 4 models (ViT, BEiT, ConvNeXt-L, ResNet-50) x batch 1, 4, 16 on one A100;
    # timm's CSVs: 8 models at batch 1024 on the RTX 4090 and the RTX 5090 (eager against -dynamo)
    hf = [p for p in PAIRS if p["id"].startswith("hfdocs-")]
    timm = [p for p in PAIRS if p["id"].startswith("timm-")]
    assert len(hf) == 4 * 3 and len(timm) == 8 * 2 and len(PAIRS) == len(hf) + len(timm)
    assert {p["eager_row"]["params"]["batch"] for p in hf} == {1, 4, 16}
    assert {p["gpu"] for p in timm} == {"rtx-4090", "rtx-5090"}
    assert len({p["id"] for p in PAIRS} | {p["id"] for p in OWN}) == len(PAIRS) + len(OWN)
    assert len(vcg.load_pairs()) == len(PAIRS) + len(OWN) == 32


def test_a_pair_is_two_rows_that_agree_in_all_but_their_execution_and_figure():
    for p in PAIRS:
        e, c = p["eager_row"], p["compiled_row"]
        assert (e["execution"], c["execution"]) == ("eager", "inductor"), p["id"]
        assert e["chip"] == c["chip"] == p["gpu"] and e["params"] == c["params"], p["id"]
        assert e.get("torch") == c.get("torch") and e["unit"] == c["unit"], p["id"]
        assert e["source"].split("/blob/")[1][:40] == c["source"].split("/blob/")[1][:40], p["id"]  # one commit
        assert e["id"].replace("-eager", "-inductor") == c["id"], p["id"]  # what the ids say agrees


def test_rows_that_differ_in_model_chip_batch_dtype_torch_or_publisher_are_no_pair():
    e = _row()
    c = _row(id="x-inductor-b1", execution="inductor", measured=1.0)
    assert [p["id"] for p in vcg.model_pairs([e, c])] == ["x-b1"]
    p = {**e["params"]}
    for other in (_row(execution="inductor", params={**p, "batch": 4}),
                  _row(execution="inductor", params={**p, "dtype": "bfloat16"}),
                  _row(execution="inductor", params={**p, "hf": "BeitForImageClassification"}),
                  _row(execution="inductor", chip="h100"),
                  _row(execution="inductor", torch="2.0.1"),
                  _row(execution="inductor", source=TIMM.replace("90cae8c5", "00000000") + "results/a.csv"),
                  _row(execution="compiled")):
        assert vcg.model_pairs([e, other]) == [], other


def test_a_csv_pairs_with_its_dynamo_twin_only():
    # timm names a run's torch.compile CSV as its eager CSV with -dynamo; another CSV of the same commit (another
    # torch, CUDA or layout, named only in the file name) is another configuration
    e = _row(source=TIMM + "results/benchmark-infer-amp-nchw-pt291-cu128-4090.csv")
    twin = _row(execution="inductor", source=TIMM + "results/benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv")
    other = _row(execution="inductor", source=TIMM + "results/benchmark-infer-amp-nchw-pt240-cu124-rtx4090-dynamo.csv")
    nhwc = _row(source=TIMM + "results/benchmark-infer-amp-nhwc-pt291-cu128-4090.csv")
    assert [p["compiled_row"]["source"] for p in vcg.model_pairs([e, twin, other])] == [twin["source"]]
    assert vcg.model_pairs([nhwc, twin]) == []


def test_cuda_graphs_make_a_second_compiled_side():
    e = _row()
    plain = _row(id="x-inductor-b1", execution="inductor", measured=1.0)
    graphs = _row(id="x-inductor-graphs-b1", execution="inductor", measured=0.5, cudagraphs=True)
    got = vcg.model_pairs([e, plain, graphs])
    assert [(p["id"], p["mode"], p["compiled_row"]["measured"]) for p in got] == [
        ("x-b1", "default", 1.0), ("x-b1-cudagraphs", "reduce-overhead", 0.5)]


def test_two_rows_of_one_side_and_configuration_are_refused():
    with pytest.raises(ValueError, match="two inductor rows"):
        vcg.model_pairs([_row(), _row(id="a", execution="inductor"), _row(id="b", execution="inductor")])


def test_a_measured_gain_is_the_eager_step_over_the_compiled_one():
    p = next(p for p in PAIRS if p["id"] == "timm-resnet50-4090-b1024")
    eager, compiled = vcg.measured(p)
    # benchmark-infer-amp-nchw-pt291-cu128-4090.csv and its -dynamo.csv, resnet50 at 224: infer_step_time
    assert eager == pytest.approx(0.237959) and compiled == pytest.approx(0.127355)
    p = next(p for p in OWN if p["id"] == "gpt-fast-llama2-7b-a100-bs1")
    eager, compiled = vcg.measured(p)
    assert eager / compiled == pytest.approx(107.0 / 25.5)  # tokens/s: the step is their inverse


def test_each_number_is_typed_in_one_place():
    assert {p["kind"] for p in OWN} <= set(vcg.TEXTS)  # no whole-model pair typed in the compile-gain file
    typed = {m["measured"] for m in ROWS}
    for p in OWN:
        assert not {p["eager"], p["compiled"]} <= typed, p["id"]


def test_the_summary_counts_within_15_percent_and_direction():
    rows = [({"id": "a", "source": "x", "kind": "own", "gpu": "a100"}, 1.20, 1.30),   # within, same side
            ({"id": "b", "source": "x", "kind": "own", "gpu": "a100"}, 1.05, 0.98),   # within, opposite
            ({"id": "c", "source": "x", "kind": "own", "gpu": "a100"}, 2.00, 1.20)]   # out, same side
    within, same, median = vcg.score(rows)
    assert (within, same) == (2, 2) and median == pytest.approx(1.30 / 1.20 - 1)
    assert vcg.summary_lines(rows)[-1].startswith("2 of 3 within 15%")

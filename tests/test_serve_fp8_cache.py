"""An fp8 KV cache with tensorwise fp8 linears (issue 37): every layer's attention is found, and the serving
simulation's step fit is exact. The tensorwise scale's amax reads back through the norm and the residual adds
into earlier layers; a depth-first walk back from the probabilities spent its cap there, found the first two
attentions only, and the rest fell to the backward finder as one kernel over many layers, whose grouping differed
with the context (the H100 fp8 GPT-J rows of benchmarks/data/published_serving.toml: "a fitted count is not an
integer")."""
from __future__ import annotations

import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.attention import find_attention
from mhlo_cost.studies.serve import StepRequest, lower_step
from mhlo_cost.studies.serve.serve import step_study
from mhlo_cost.studies.serve.stepmodel import Kernels, fit

WIDTHS = (("heads", 2), ("hidden", 64), ("vocab", 128))


def _request(layers: int, **kw) -> StepRequest:
    return StepRequest(mode="decode", model="gpt", overrides=(*WIDTHS, ("layers", layers)),
                       precision="fp8-tensorwise,kv-fp8", **kw)


@pytest.mark.parametrize("layers", [1, 4, 8])
def test_an_fp8_cache_decode_has_one_attention_per_layer(layers):
    step = lower_step(_request(layers, batch=2, context=64, tokens=1))
    a = analyze(step.lowered.text, AnalysisOptions(dataflow=True))
    found = find_attention(a.rows, a.producers)
    assert len(found) == layers
    # each is one layer's: its two dots are attention-shaped (batch x heads x 1 x ...), none a linear's
    for att in found:
        assert len(a.rows[att.qk].result.shape) == 4 and len(a.rows[att.pv].result.shape) == 4


def test_the_step_fit_of_an_fp8_cache_decode_is_exact():
    model = fit(_request(4), get_profile("h100"))
    assert model.checked["counts_exact"]
    # the fit's FLOPs at a point not lowered for it, against that point's own lowering
    b, c = 24, 768
    step = lower_step(_request(4, batch=b, context=c, tokens=1))
    k = Kernels.of(step_study(step, get_profile("h100")))
    assert model.exact(b, c) == (sum(k.flops), sum(k.bytes))

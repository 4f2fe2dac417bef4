"""The dgrad / wgrad split under an fp8 recipe (issue 38): each GEMM operand is cast (``x / scale`` then a convert
to float8), so the forward product reads the cast and not the parameter. Worked out here from the shapes: a layer
``x (B, a) @ W (a, b)`` has one forward product, one dgrad ``dy (B, b) x W -> (B, a)`` and one wgrad
``x x dy -> (a, b)`` (the weight's shape), each 2 B a b FLOPs."""
import jax
import jax.numpy as jnp
import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.lower.models.quant import fp8_matmul
from mhlo_cost.lower.training.steps import lower_step
from mhlo_cost.machines.precision import training_recipe

B, DIMS = 32, (16, 32, 24, 8)


def _phases(precision: str):
    mm = fp8_matmul(training_recipe(precision))

    def loss(params, x, y):
        h = x * params["scale"]  # (so that the first layer's input needs a gradient too)
        for i, w in enumerate(params["w"]):
            with jax.named_scope(f"layers.{i}"):
                h = jnp.tanh(mm(h, w))
        d = h - y
        return jnp.mean(d * d)

    bf = jnp.bfloat16
    p = {"w": [jax.ShapeDtypeStruct((a, b), bf) for a, b in zip(DIMS, DIMS[1:])],
         "scale": jax.ShapeDtypeStruct((DIMS[0],), bf)}
    x, y = jax.ShapeDtypeStruct((B, DIMS[0]), bf), jax.ShapeDtypeStruct((B, DIMS[-1]), bf)
    a = analyze(lower_step(loss, p, (x, y), "adamw").as_text(debug_info=True), AnalysisOptions(phases=True))
    return [(ph, g, r.result.shape) for r, ph, g in zip(a.rows, a.phases.phase, a.phases.grad) if r.kind == "dot"], a


@pytest.mark.parametrize("precision", ["fp8-tensorwise", "fp8-rowwise"])
def test_fp8_wgrad_is_labelled_wgrad(precision):
    dots, a = _phases(precision)
    weights = {(i, o) for i, o in zip(DIMS, DIMS[1:])}
    inputs = {(B, i) for i in DIMS[:-1]}
    assert sorted(s for ph, _, s in dots if ph == "forward") == sorted((B, o) for o in DIMS[1:])
    assert sorted(s for ph, g, s in dots if g == "wgrad") == sorted(weights)
    assert sorted(s for ph, g, s in dots if g == "dgrad") == sorted(inputs)
    assert not any("by shape" in n for n in a.phases.notes)

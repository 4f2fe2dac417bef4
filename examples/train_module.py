"""A model of your own for ``python -m mhlo_cost.lower.training --module examples.train_module:make``.

JAX: ``make()`` returns ``(apply, params)``: ``apply(params, x)`` is a 2-layer MLP classifier under named
scopes (``layers.0``, ``layers.1``: the blocks), ``params`` its weights as shapes (nothing allocated).
"""
import jax
import jax.numpy as jnp


def make(width: int = 64, hidden: int = 256, classes: int = 10):
    def apply(params, x):
        for i, p in enumerate(params):
            with jax.named_scope(f"layers.{i}"):
                x = x @ p["w"] + p["b"]
                if i + 1 < len(params):
                    x = jax.nn.gelu(x)
        return x

    dims = [(width, hidden), (hidden, classes)]
    params = [{"w": jax.ShapeDtypeStruct(d, jnp.float32), "b": jax.ShapeDtypeStruct(d[1:], jnp.float32)}
              for d in dims]
    return apply, params

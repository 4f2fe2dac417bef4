"""The JAX frontend: the bundled pure-JAX models, lowered with ``jax.jit(...).lower`` from shapes alone.

Parameters and inputs are ``jax.ShapeDtypeStruct`` trees, so nothing is allocated whatever the size.
STDiT3 may also be lowered under a parallel strategy (``mhlo_cost.lower.models.parallel``): pass a
``ShardedConfig`` as the configuration, or ``plan=``; the strategy is lowered with ``jax.shard_map`` over
an abstract mesh, so no devices are needed and every collective is explicit in the StableHLO.
"""
from __future__ import annotations

from . import FrontendError, Lowered

MODELS = ("stdit3", "gpt")


def lower_jax(model: str, cfg=None, *, plan=None):
    """The ``jax.stages.Lowered`` of ``model`` (``stdit3`` or ``gpt``) for ``cfg`` (None: the default).

    ``cfg`` may be a ``parallel.ShardedConfig`` (a configuration with its plan), or ``plan`` a
    ``parallel.Plan``: STDiT3 is then lowered under that strategy.
    """
    from ..models.parallel import ShardedConfig

    if isinstance(cfg, ShardedConfig):
        if plan is not None and plan != cfg.plan:
            raise FrontendError("two different parallel plans given (the configuration's and plan=)")
        cfg, plan = cfg.cfg, cfg.plan
    if plan is not None and plan.strategy == "none":
        plan = None
    if model == "stdit3":
        from ..models import stdit3
        from ..models.config import STDiT3Config

        cfg = cfg if cfg is not None else STDiT3Config()
        if plan is not None:
            from ..models import parallel

            try:
                return parallel.lower(cfg, plan)
            except ValueError as e:
                raise FrontendError(str(e)) from None
        return stdit3.lower(cfg)
    if model == "gpt":
        if plan is not None:
            raise FrontendError("parallel strategies are written for stdit3 only, not gpt")
        from ..models import gpt

        return gpt.lower(cfg if cfg is not None else gpt.GPTConfig())
    raise FrontendError(f"the jax frontend has no model {model!r} (known: {', '.join(MODELS)})")


def _abstract(x, default_dtype="float32"):
    """A JAX input from a spec: ShapeDtypeStruct, array, ``inputs.TensorSpec``, (shape, dtype) or a shape."""
    import jax

    from .inputs import TensorSpec

    if isinstance(x, TensorSpec):
        return jax.ShapeDtypeStruct(x.shape, jax.dtypes.canonicalize_dtype(x.dtype or default_dtype))
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(tuple(x.shape), jax.dtypes.canonicalize_dtype(x.dtype))
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], (tuple, list)):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x[0]), jax.dtypes.canonicalize_dtype(x[1]))
    if isinstance(x, (tuple, list)) and all(isinstance(d, int) for d in x):
        return jax.ShapeDtypeStruct(tuple(x), jax.dtypes.canonicalize_dtype(default_dtype))
    raise FrontendError(f"cannot read an input shape from {x!r}")


def is_nnx_module(obj) -> bool:
    import sys

    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(obj, nnx.Module)


def traceable(obj, input_specs=(), *, input_kwargs: dict | None = None, kwargs: dict | None = None,
              locations: bool = True, dtype: str = "float32"):
    """``(fn, args)`` for ``jax.jit(fn).lower(*args)``: a JAX function called as ``obj(*inputs, **kw)``,
    or a flax.nnx Module (its state becomes the first argument, its submodules named scopes)."""
    import functools

    args = tuple(_abstract(s, dtype) for s in input_specs)
    kw = {k: _abstract(v, dtype) for k, v in (input_kwargs or {}).items()}
    static = dict(kwargs or {})
    if is_nnx_module(obj):
        import jax
        from flax import nnx

        from .scopes import nnx_module_scopes

        graphdef, state = nnx.split(obj)
        state = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), state)

        def forward(state, args, kw):
            model = nnx.merge(graphdef, state)
            with nnx_module_scopes(model) if locations else _null():
                return model(*args, **kw, **static)

        forward.__name__ = forward.__qualname__ = type(obj).__name__
        return forward, (state, args, kw)
    if not callable(obj):
        raise FrontendError(f"expected a JAX function or a flax.nnx Module, got {type(obj).__name__}")
    fn = functools.partial(obj, **static) if static else obj

    def call(args, kw):
        return fn(*args, **kw)

    call.__name__ = call.__qualname__ = getattr(obj, "__name__", type(obj).__name__)
    return call, (args, kw)


def _null():
    import contextlib

    return contextlib.nullcontext()


def lower_traceable(fn, args, *, locations: bool = True, info: dict | None = None) -> Lowered:
    import jax

    low = jax.jit(fn).lower(*args)
    return Lowered(text=low.as_text(debug_info=locations), info={"frontend": "jax", **(info or {})})


def lower(model: str, cfg=None, *, locations: bool = True, plan=None) -> Lowered:
    """StableHLO text of ``model``; with ``locations`` the ops carry their ``jit(name)/scope/...`` names."""
    low = lower_jax(model, cfg, plan=plan)
    info = {"frontend": "jax", "model": model}
    from ..models.parallel import ShardedConfig

    p = plan if plan is not None else (cfg.plan if isinstance(cfg, ShardedConfig) else None)
    if p is not None:
        info["parallel"] = p.describe()
    return Lowered(text=low.as_text(debug_info=locations), info=info)

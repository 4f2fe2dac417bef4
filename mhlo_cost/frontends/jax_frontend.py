"""The JAX frontend: the bundled pure-JAX models, lowered with ``jax.jit(...).lower`` from shapes alone.

Parameters and inputs are ``jax.ShapeDtypeStruct`` trees, so nothing is allocated whatever the size.
STDiT3 may also be lowered under a parallel strategy (``mhlo_cost.models.parallel``): pass a
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


def lower_module(spec: str, input_shapes, dtype: str = "float32", *, locations: bool = True) -> Lowered:
    """A user's JAX function, named ``'package.module:factory'`` (the factory returns the function to
    lower), lowered with abstract inputs of ``input_shapes`` in ``dtype``."""
    import jax

    from . import resolve_spec

    fn = resolve_spec(spec)()
    if not callable(fn):
        raise FrontendError(f"{spec}() returned {type(fn).__name__}, not a function to lower")
    args = [jax.ShapeDtypeStruct(tuple(int(d) for d in s), dtype) for s in input_shapes]
    low = jax.jit(fn).lower(*args)
    return Lowered(text=low.as_text(debug_info=locations), info={"frontend": "jax", "model": spec})


def lower(model: str, cfg=None, *, locations: bool = True, plan=None) -> Lowered:
    """StableHLO text of ``model``; with ``locations`` the ops carry their ``jit(name)/scope/...`` names."""
    low = lower_jax(model, cfg, plan=plan)
    info = {"frontend": "jax", "model": model}
    from ..models.parallel import ShardedConfig

    p = plan if plan is not None else (cfg.plan if isinstance(cfg, ShardedConfig) else None)
    if p is not None:
        info["parallel"] = p.describe()
    return Lowered(text=low.as_text(debug_info=locations), info=info)

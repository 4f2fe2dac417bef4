"""PyTorch frontend: a ``torch.nn.Module`` lowered to StableHLO through torchax (torch ops run as JAX ops).

The module is built on the ``meta`` device, so no weight is allocated: its parameters and buffers, like
its inputs, reach ``jax.jit(...).lower`` as ``jax.ShapeDtypeStruct`` shapes, and torchax traces the
forward with JAX tracers in place of the tensors. The full STDiT3-XL at 204_640_360 (1.2 B parameters)
lowers this way in about 12 s with a peak RSS of about 0.55 GB.

Module paths become locations: while lowering, every submodule's forward runs inside
``jax.named_scope`` of its name relative to the closest enclosing module that ran (a ``ModuleList`` is
never called, so ``spatial_blocks.3`` stays one component), which gives locations such as
``jit(forward)/spatial_blocks.3/attn/qkv/dot_general``. torchax's own per-aten-op scopes
(``aten::addmm``...) are left out unless ``aten_scopes=True``.

Public functions: :func:`lower` (bundled models by name) and :func:`lower_module` (any module).
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Callable, Iterable, Sequence

import jax
import numpy as np

from . import FrontendError, Lowered
from ._torch_shim import import_torchax
from .attributes import attribute_specs, bound, split
from .inputs import jax_dtype
from .values import concrete, concrete_values

MODELS = ("stdit3",)



def exclude_from_source_locations() -> None:
    """Make JAX attribute each op's file:line to the user's torch code, not to torch, torchax or this file.

    JAX skips its own and the standard library's frames; where site-packages lies outside the standard
    library (a virtual environment) torch's and torchax's frames would otherwise be taken as the user's."""
    import os

    import torch

    try:
        from jax._src import source_info_util as siu
    except ImportError:  # pragma: no cover - a private jax API; locations only get less precise
        return
    tx = importlib.import_module("torchax")
    for path in (__file__, os.path.dirname(torch.__file__) + os.sep, os.path.dirname(tx.__file__) + os.sep):
        if path not in siu._exclude_paths:
            siu.register_exclusion(path)


# ---------------------------------------------------------------------------------------------------------
# Scopes
# ---------------------------------------------------------------------------------------------------------


def module_scopes(root, *, skip_root: bool = True):
    """Each submodule of ``root`` runs under ``jax.named_scope`` of its path (see :mod:`.scopes`); the parts
    of a mixture-of-experts layer under their roles (``router``, ``experts``, ``shared_experts``: :mod:`.moe`)."""
    from .moe import scope_names
    from .scopes import torch_module_scopes

    return torch_module_scopes(root, skip_root=skip_root, names=scope_names(root))


class _NoScopeJax:
    """Proxy of the ``jax`` module whose ``named_scope`` does nothing (mutes torchax's per-op scopes)."""

    def __getattr__(self, name):
        return getattr(jax, name)

    @staticmethod
    def named_scope(name):
        return contextlib.nullcontext()


@contextlib.contextmanager
def mute_aten_scopes(enabled: bool):
    if not enabled:
        yield
        return
    tensor_mod = importlib.import_module("torchax.tensor")
    saved = tensor_mod.jax
    tensor_mod.jax = _NoScopeJax()
    try:
        yield
    finally:
        tensor_mod.jax = saved


@contextlib.contextmanager
def fold_unit_alpha(env, enabled: bool):
    """torchax lowers ``aten.add``/``aten.sub`` as ``x + y * alpha`` even for the default alpha of 1, which
    puts a multiply by one into the IR after every addition (XLA folds it away; a FLOP count would not).
    While active, those ops skip the multiply when alpha is 1."""
    if not enabled:
        yield
        return
    import dataclasses

    import torch

    jaten = importlib.import_module("torchax.ops.jaten")
    binary = jaten._run_binary_pointwise_operator

    def make(fn):
        def impl(x, y, *args, alpha=1, **kwargs):
            if args:  # alpha given positionally (aten.sub's schema)
                alpha = args[0]
            if not (isinstance(alpha, (int, float)) and alpha == 1):
                y = y * alpha
            return binary(fn, x, y)
        return impl

    targets = {
        torch.ops.aten.add.Tensor: lambda a, b: a + b,
        torch.ops.aten.add.Scalar: lambda a, b: a + b,
        torch.ops.aten.sub.Tensor: lambda a, b: a - b,
        torch.ops.aten.sub.Scalar: lambda a, b: a - b,
    }
    saved = {}
    for op, fn in targets.items():
        cur = env._ops.get(op)
        if cur is None or not cur.is_jax_function:
            continue
        saved[op] = cur
        env._ops[op] = dataclasses.replace(cur, func=make(fn))
    try:
        yield
    finally:
        env._ops.update(saved)


# ---------------------------------------------------------------------------------------------------------
# Lowering
# ---------------------------------------------------------------------------------------------------------


def as_spec(x, default_dtype):
    """Shape-like -> ShapeDtypeStruct: a ShapeDtypeStruct, a tensor or array, an ``inputs.TensorSpec``, a
    (shape, dtype) pair, or a bare shape (tuple of ints, given ``default_dtype``)."""
    from .inputs import TensorSpec

    if isinstance(x, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(x.shape, jax_dtype(x.dtype))
    if isinstance(x, TensorSpec):
        return jax.ShapeDtypeStruct(x.shape, jax_dtype(x.dtype or default_dtype))
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(tuple(x.shape), jax_dtype(x.dtype))
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], (tuple, list)) \
            and not isinstance(x[1], (int, np.integer)):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x[0]), jax_dtype(x[1]))
    if isinstance(x, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in x):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x), jax_dtype(default_dtype))
    raise TypeError(f"cannot read an input shape from {x!r}")


def state_specs(module) -> dict:
    """Every parameter and buffer -> ShapeDtypeStruct, a tied or shared one once (under its first name, as
    ``state_dict`` and the framework hold it): ``functional_call`` ties the other names to it."""
    specs = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t is not None:
            specs[name] = jax.ShapeDtypeStruct(tuple(t.shape), jax_dtype(t.dtype))
    return specs


def tensor_leaves(out) -> list:
    """The tensors of a forward's output, in order, whatever holds them: tuples, lists, dicts,
    ``ModelOutput`` and other dataclasses; ``None`` and plain Python values are left out."""
    import dataclasses
    from collections.abc import Mapping

    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):  # dict, OrderedDict, transformers' ModelOutput (None fields are absent)
        items = list(out.values())
    elif isinstance(out, (tuple, list)):
        items = list(out)
    elif dataclasses.is_dataclass(out) and not isinstance(out, type):
        items = [getattr(out, f.name) for f in dataclasses.fields(out)]
    else:
        return []
    return [t for item in items for t in tensor_leaves(item)]


def module_dtype(module):
    """The dtype of the module's first floating-point parameter (None without any)."""
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def resolve_module(module_or_factory, dtype):
    """A module, a zero-argument factory, or 'package.module:factory' -> module on the meta device."""
    import torch

    obj = module_or_factory
    if isinstance(obj, str):
        from . import resolve_spec

        obj = resolve_spec(obj)
    if isinstance(obj, torch.nn.Module):
        module = obj
    elif callable(obj):
        with torch.device("meta"):
            module = obj()
        if not isinstance(module, torch.nn.Module):
            raise FrontendError(f"the factory returned {type(module).__name__}, not a torch.nn.Module")
    else:
        raise FrontendError(f"expected a torch.nn.Module, a factory or 'pkg.mod:factory', got {obj!r}")
    if dtype is not None:
        module = module.to(_torch_dtype(dtype))
    return module.eval()


def _torch_dtype(dtype):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = jax.numpy.dtype(dtype).name
    return getattr(torch, name)


def traceable(module, input_specs: Sequence, *, input_kwargs: dict | None = None, kwargs: dict | None = None,
              locations: bool = True, aten_scopes: bool = False, fold_alpha: bool = True,
              name: str = "forward", values: dict | None = None, amp=None):
    """``(fn, args)``: a JAX function of ``(state, buffers, inputs, keyword inputs)`` that runs
    ``module.forward`` through torchax, and the abstract arguments to lower it with (``jax.jit(fn).lower(*args)``).
    ``state`` holds the parameters, ``buffers`` the buffers (batch-norm statistics): the lowered arguments are
    named ``state['fc.weight']``, ``buffers['bn1.running_mean']``, so that the analysis tells them apart.

    ``input_specs`` are the positional inputs, ``input_kwargs`` the keyword ones (name -> spec), as
    ShapeDtypeStructs or anything :func:`as_spec` reads; ``kwargs`` are plain (static) keyword values;
    ``values`` keyword inputs given by value (name -> ``inputs.ValueSpec``), concrete tensors while the
    forward is traced (see :mod:`.values`). The function returns the tensors of the output as a flat list
    (:func:`tensor_leaves`). ``amp``: the forward runs under CUDA autocast to this dtype
    (:mod:`.autocast`: parameters kept as they are, cast where ``torch.autocast("cuda")`` casts them).
    """
    import torch

    tx = import_torchax()
    exclude_from_source_locations()
    env = tx.default_env()
    default = module_dtype(module) or torch.float32
    specs = state_specs(module)
    buffer_names = {n for n, _ in module.named_buffers()}
    state = {k: v for k, v in specs.items() if k not in buffer_names}
    buffers = {k: v for k, v in specs.items() if k in buffer_names}
    buffers.update(attribute_specs(module))  # plain tensor attributes on meta, as buffers
    args = tuple(as_spec(s, default) for s in input_specs)
    kw_specs = {k: as_spec(v, default) for k, v in (input_kwargs or {}).items()}
    static_kwargs = dict(kwargs or {})
    values = dict(values or {})
    _no_clash(kw_specs, static_kwargs, values)

    def forward(state, buffers, inputs, kw_inputs):
        state_t, inputs_t, kw_t = env.j2t_iso(({**state, **buffers}, inputs, {**kw_inputs, **concrete(values)}))
        state_t, attrs = split(state_t, module)
        scopes = module_scopes(module) if locations else contextlib.nullcontext()
        amp_cm = _autocast(env, amp, [state_t[k] for k in state if k in state_t])
        # Default device "jax": tensors the forward creates without a device (torch.arange(n)) become JAX
        # values too, instead of CPU tensors that torchax refuses to mix with its own.
        with env, torch.device("jax"), scopes, mute_aten_scopes(not aten_scopes), \
                fold_unit_alpha(env, fold_alpha), concrete_values(env, bool(values)), torch.no_grad(), \
                bound(module, attrs), amp_cm:
            out = torch.func.functional_call(module, state_t, tuple(inputs_t), {**static_kwargs, **kw_t},
                                             strict=False)
        return env.t2j_iso(tensor_leaves(out))

    forward.__name__ = name
    forward.__qualname__ = name
    return forward, (state, buffers, args, kw_specs)


def _autocast(env, amp, params):
    """The CUDA autocast of :mod:`.autocast` to ``amp`` (``float16``, ``bfloat16`` or a torch dtype; None: none)
    over ``env``'s calls."""
    if amp is None:
        return contextlib.nullcontext()
    from .autocast import CudaAutocast, torch_dtype

    return CudaAutocast(env, torch_dtype(amp), params).active()


def _no_clash(kw_specs: dict, static_kwargs: dict, values: dict) -> None:
    """A keyword given one way only: as an input by shape, by value, or as a plain keyword value."""
    for (a, a_what), (b, b_what) in (((kw_specs, "an input"), (static_kwargs, "a plain keyword value")),
                                     ((values, "an input by value"), (kw_specs, "an input by shape")),
                                     ((values, "an input by value"), (static_kwargs, "a plain keyword value"))):
        clash = sorted(set(a) & set(b))
        if clash:
            raise FrontendError(f"{', '.join(clash)} given both as {a_what} and as {b_what}")


def lower_jax(module, input_specs: Sequence, *, locations: bool = True, aten_scopes: bool = False,
              fold_alpha: bool = True, name: str = "forward", kwargs: dict | None = None,
              input_kwargs: dict | None = None):
    """``jax.jit(...).lower(...)`` of ``module.forward`` through torchax, from shapes only (see
    :func:`traceable`). ``fold_alpha`` drops torchax's multiply-by-one in every add/sub (see
    :func:`fold_unit_alpha`). Returns the ``jax.stages.Lowered``."""
    fn, args = traceable(module, input_specs, input_kwargs=input_kwargs, kwargs=kwargs, locations=locations,
                         aten_scopes=aten_scopes, fold_alpha=fold_alpha, name=name)
    return jax.jit(fn).lower(*args)


def _as_text(lowered, locations: bool) -> str:
    return lowered.as_text(debug_info=locations)


def lower_module(module_or_factory, input_shapes: Iterable, dtype="float32", *, locations: bool = True,
                 aten_scopes: bool = False, kwargs: dict | None = None, input_kwargs: dict | None = None):
    """Lower a user's ``torch.nn.Module`` to StableHLO text through torchax, on the meta device.

    ``module_or_factory``: an ``nn.Module`` (ideally already on ``meta``), a zero-argument callable that
    builds one (called under ``torch.device('meta')``), or a ``'package.module:factory'`` string.
    ``input_shapes``: one entry per positional input of ``forward``: a shape tuple such as ``(2, 16, 64)``
    (of the module's dtype), a ``(shape, dtype)`` pair, an ``inputs.TensorSpec``, a
    ``jax.ShapeDtypeStruct`` or a tensor; ``input_kwargs`` the same by keyword. ``dtype``: the dtype the
    module is cast to (None keeps the module's). ``kwargs``: plain keyword arguments of ``forward``.
    Returns a ``Lowered`` (``text`` set, ``bytecode`` None).
    """
    module = resolve_module(module_or_factory, dtype)
    lowered = lower_jax(module, list(input_shapes), locations=locations, aten_scopes=aten_scopes, kwargs=kwargs,
                        input_kwargs=input_kwargs)
    return Lowered(text=_as_text(lowered, locations),
                   info={"frontend": "torchax", "model": type(module).__name__})


def _stdit3(cfg, deployed: bool = False):
    from ..models import stdit3_torch as st
    from ..models.config import STDiT3Config

    cfg = cfg or STDiT3Config()
    module = st.build(cfg, "meta", deployed=deployed)
    specs = [jax.ShapeDtypeStruct(shape, jax_dtype(dt)) for shape, dt in st.input_specs(cfg)]
    return module, specs


_BUILDERS: dict[str, Callable] = {"stdit3": _stdit3}


def lower(model: str, cfg=None, *, locations: bool = True, aten_scopes: bool = False, deployed: bool = False):
    """Lower a bundled model ('stdit3') for ``cfg`` (None: the model's default) through torchax; ``deployed``:
    the module as OpenSora 1.2's sampling runs it (:mod:`mhlo_cost.lower.models.stdit3_torch_deployed`), else
    the counting module (the JAX model's FLOPs).

    Returns a ``Lowered`` whose ``text`` is StableHLO with module paths in the location names.
    """
    try:
        build = _BUILDERS[model]
    except KeyError:
        raise FrontendError(f"the torchax frontend has no model {model!r} (known: {', '.join(_BUILDERS)})") \
            from None
    module, specs = build(cfg, deployed=True) if deployed else build(cfg)
    lowered = lower_jax(module, specs, locations=locations, aten_scopes=aten_scopes)
    info = {"frontend": "torchax", "model": model, **({"deployed": True} if deployed else {})}
    return Lowered(text=_as_text(lowered, locations), info=info)

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
from typing import Any, Callable, Iterable, Sequence

import jax
import numpy as np

from . import FrontendError, Lowered
from ._torch_shim import import_torchax

MODELS = ("stdit3",)



def _exclude_from_source_locations() -> None:
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


@contextlib.contextmanager
def module_scopes(root, *, skip_root: bool = True):
    """While active, each submodule of ``root`` runs its forward under ``jax.named_scope`` of its path.

    The scope pushed for a module is its path relative to the module whose forward encloses it:
    ``spatial_blocks.3`` then ``attn`` then ``qkv``, which nest into ``spatial_blocks.3/attn/qkv``.
    """
    stack: list[tuple[str, Any]] = []  # (full path, entered named_scope)
    handles = []

    def pre_hook(path):
        def hook(module, args):
            parent = stack[-1][0] if stack else ""
            local = path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path
            cm = jax.named_scope(local)
            cm.__enter__()
            stack.append((path, cm))
        return hook

    def post_hook(path):
        def hook(module, args, output):
            if stack and stack[-1][0] == path:
                _, cm = stack.pop()
                cm.__exit__(None, None, None)
        return hook

    for path, mod in root.named_modules():
        if skip_root and path == "":
            continue
        handles.append(mod.register_forward_pre_hook(pre_hook(path)))
        handles.append(mod.register_forward_hook(post_hook(path)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        while stack:  # a forward that raised left scopes open
            _, cm = stack.pop()
            cm.__exit__(None, None, None)


class _NoScopeJax:
    """Proxy of the ``jax`` module whose ``named_scope`` does nothing (mutes torchax's per-op scopes)."""

    def __getattr__(self, name):
        return getattr(jax, name)

    @staticmethod
    def named_scope(name):
        return contextlib.nullcontext()


@contextlib.contextmanager
def _mute_aten_scopes(enabled: bool):
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
def _fold_unit_alpha(env, enabled: bool):
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


def _jax_dtype(dtype):
    """A torch dtype, a numpy/jax dtype or a name -> numpy dtype understood by JAX."""
    import torch

    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    return jax.numpy.dtype(dtype)


def _spec(x, default_dtype):
    """Shape-like -> ShapeDtypeStruct: a ShapeDtypeStruct, a torch tensor, an array, a (shape, dtype)
    pair, or a bare shape (tuple of ints, given ``default_dtype``)."""
    import torch

    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, torch.Tensor):
        return jax.ShapeDtypeStruct(tuple(x.shape), _jax_dtype(x.dtype))
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(tuple(x.shape), _jax_dtype(x.dtype))
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], (tuple, list)) \
            and not isinstance(x[1], (int, np.integer)):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x[0]), _jax_dtype(x[1]))
    if isinstance(x, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in x):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x), _jax_dtype(default_dtype))
    raise TypeError(f"cannot read an input shape from {x!r}")


def _state_specs(module) -> dict:
    """Every parameter and buffer name -> ShapeDtypeStruct (a tied weight is one argument per name)."""
    specs = {}
    named = list(module.named_parameters(remove_duplicate=False)) + \
        list(module.named_buffers(remove_duplicate=False))
    for name, t in named:
        if t is not None:
            specs[name] = jax.ShapeDtypeStruct(tuple(t.shape), _jax_dtype(t.dtype))
    return specs


def _resolve_module(module_or_factory, dtype):
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
            raise TypeError(f"the factory returned {type(module).__name__}, not a torch.nn.Module")
    else:
        raise TypeError(f"expected a torch.nn.Module, a factory or 'pkg.mod:factory', got {obj!r}")
    if dtype is not None:
        module = module.to(_torch_dtype(dtype))
    return module.eval()


def _torch_dtype(dtype):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = jax.numpy.dtype(dtype).name
    return getattr(torch, name)


def lower_jax(module, input_specs: Sequence, *, locations: bool = True, aten_scopes: bool = False,
              fold_alpha: bool = True, name: str = "forward", kwargs: dict | None = None):
    """``jax.jit(...).lower(...)`` of ``module.forward`` through torchax, from shapes only.

    ``input_specs`` are ShapeDtypeStructs of the positional inputs; ``kwargs`` are static (Python) keyword
    arguments. ``fold_alpha`` drops torchax's multiply-by-one in every add/sub (see
    :func:`_fold_unit_alpha`). Returns the ``jax.stages.Lowered``.
    """
    import torch

    tx = import_torchax()
    _exclude_from_source_locations()
    env = tx.default_env()
    state = _state_specs(module)
    static_kwargs = dict(kwargs or {})

    def forward(state, inputs):
        state_t, inputs_t = env.j2t_iso((state, inputs))
        scopes = module_scopes(module) if locations else contextlib.nullcontext()
        # Default device "jax": tensors the forward creates without a device (torch.arange(n)) become JAX
        # values too, instead of CPU tensors that torchax refuses to mix with its own.
        with env, torch.device("jax"), scopes, _mute_aten_scopes(not aten_scopes), \
                _fold_unit_alpha(env, fold_alpha), torch.no_grad():
            out = torch.func.functional_call(module, state_t, tuple(inputs_t), static_kwargs, strict=False)
        return env.t2j_iso(out)

    forward.__name__ = name
    forward.__qualname__ = name
    return jax.jit(forward).lower(state, tuple(input_specs))


def _as_text(lowered, locations: bool) -> str:
    return lowered.as_text(debug_info=locations)


def lower_module(module_or_factory, input_shapes: Iterable, dtype="float32", *, locations: bool = True,
                 aten_scopes: bool = False, kwargs: dict | None = None):
    """Lower a user's ``torch.nn.Module`` to StableHLO text through torchax, on the meta device.

    ``module_or_factory``: an ``nn.Module`` (ideally already on ``meta``), a zero-argument callable that
    builds one (called under ``torch.device('meta')``), or a ``'package.module:factory'`` string.
    ``input_shapes``: one entry per positional input of ``forward``: a shape tuple such as ``(2, 16, 64)``
    (of ``dtype``), a ``(shape, dtype)`` pair, a ``jax.ShapeDtypeStruct`` or a tensor. ``dtype``: dtype of
    the bare shapes and of the parameters (None keeps the module's). ``kwargs``: static keyword arguments
    of ``forward``. Returns a ``Lowered`` (``text`` set, ``bytecode`` None).
    """
    module = _resolve_module(module_or_factory, dtype)
    specs = [_spec(s, dtype or "float32") for s in input_shapes]
    lowered = lower_jax(module, specs, locations=locations, aten_scopes=aten_scopes, kwargs=kwargs)
    return Lowered(text=_as_text(lowered, locations),
                   info={"frontend": "torchax", "model": type(module).__name__})


def _stdit3(cfg):
    from ..models import stdit3_torch as st
    from ..models.config import STDiT3Config

    cfg = cfg or STDiT3Config()
    module = st.build(cfg, "meta")
    specs = [jax.ShapeDtypeStruct(shape, _jax_dtype(dt)) for shape, dt in st.input_specs(cfg)]
    return module, specs


_BUILDERS: dict[str, Callable] = {"stdit3": _stdit3}


def lower(model: str, cfg=None, *, locations: bool = True, aten_scopes: bool = False):
    """Lower a bundled model ('stdit3') for ``cfg`` (None: the model's default) through torchax.

    Returns a ``Lowered`` whose ``text`` is StableHLO with module paths in the location names.
    """
    try:
        build = _BUILDERS[model]
    except KeyError:
        raise FrontendError(f"the torchax frontend has no model {model!r} (known: {', '.join(_BUILDERS)})") \
            from None
    module, specs = build(cfg)
    lowered = lower_jax(module, specs, locations=locations, aten_scopes=aten_scopes)
    return Lowered(text=_as_text(lowered, locations), info={"frontend": "torchax", "model": model})

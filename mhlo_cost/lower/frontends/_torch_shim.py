"""Import torchax on torch versions that dropped the named-tensor (``Dimname``) operator overloads.

torchax (0.0.13) names a few ``aten`` overloads at import time (``aten.prod.dim_Dimname`` in its AMP
policy table; ``aten.index_fill.Dimname_*``, ``aten.unbind.Dimname``, ``aten.norm.names_*``,
``aten.std.names_dim``... in its decomposition list). torch 2.13 removed those overloads, so
``torch.ops.aten.prod.dim_Dimname`` raises AttributeError and ``import torchax`` fails. While torchax imports, :func:`import_torchax` lets a lookup of a missing
named-tensor overload return an inert placeholder: a hashable object that is no ``OperatorBase``, so
``torch._decomp.get_decompositions`` skips it and the AMP table holds a key nothing ever matches.
Any other missing overload still raises. The patch is undone once torchax is imported and its default
environment (which loads the operator and decomposition tables) is built.

torchax also registers its own implementations of some torch functions (``F.linear``, ``F.pad``,
``torch.linalg.solve``...) whose Python parameters are named differently from torch's (``F.linear(input,
weight, bias)`` is ``linear(self, weights, bias)`` there), so a call by torch's keyword names fails
(timm's EVA-02 calls ``F.linear(x, weight=..., bias=...)``). :func:`accept_torch_keywords` wraps each such
implementation in the environment so that it takes torch's names too; :func:`keyword_gaps` lists them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import sys
from types import ModuleType


class RemovedOverload:
    """Placeholder for an operator overload that the running torch no longer has."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<removed overload {self.name}>"

    def __hash__(self) -> int:
        return hash(("RemovedOverload", self.name))

    def __eq__(self, other) -> bool:
        return isinstance(other, RemovedOverload) and other.name == self.name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.name} does not exist in this torch version")


def _is_named_tensor_overload(key: str) -> bool:
    """Overload names of the named-tensor API: ``dim_Dimname``, ``Dimname_Scalar``, ``dimname_out``,
    ``names_dim``, ``correction_names``... (torchax 0.0.13 names 21 of them; torch 2.13 has none)."""
    k = key.lower()
    return "dimname" in k or k == "names" or k.startswith("names_") or k.endswith("_names") \
        or "_names_" in k


@contextlib.contextmanager
def tolerate_removed_dimname_overloads():
    """While active, a missing ``*Dimname*`` overload of a torch op packet yields a RemovedOverload."""
    from torch._ops import OpOverloadPacket

    original = OpOverloadPacket.__getattr__

    def __getattr__(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if _is_named_tensor_overload(key):
                return RemovedOverload(f"{self._qualified_op_name}.{key}")
            raise

    OpOverloadPacket.__getattr__ = __getattr__
    try:
        yield
    finally:
        OpOverloadPacket.__getattr__ = original


def import_torchax() -> ModuleType:
    """``import torchax`` and build its default environment, tolerating the Dimname overloads that newer
    torch versions removed (torchax names some at import, the rest when its first environment loads its
    operator and decomposition tables)."""
    mod = sys.modules.get("torchax")
    if mod is not None and getattr(mod, "_mhlo_cost_ready", False):
        return mod
    from ._imports import collector_paused

    with collector_paused():
        return _import_torchax(mod)


def _import_torchax(mod) -> ModuleType:
    import torch  # noqa: F401  (the shim patches torch's op packets)

    # A failed earlier ``import torchax`` leaves partially initialised torchax.* modules behind: drop them.
    if mod is None or not hasattr(mod, "default_env"):
        for name in [n for n in sys.modules if n == "torchax" or n.startswith("torchax.")]:
            del sys.modules[name]
    with tolerate_removed_dimname_overloads():
        mod = importlib.import_module("torchax")
        env = mod.default_env()  # loads torchax.ops.* and torchax.decompositions
    accept_torch_keywords(env)
    mod._mhlo_cost_ready = True
    return mod


# ---------------------------------------------------------------------------------------------------------
# torch's keyword names for torchax's own implementations of torch functions
# ---------------------------------------------------------------------------------------------------------

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


#: Built-ins whose ``aten`` schema is TorchScript's own (``aten::tensor(t, ...)``), not what Python binds
#: (``torch.tensor(data, ...)``).
_SCRIPT_ONLY = ("tensor", "as_tensor")


def _torch_signature(fn):
    """The names torch takes for ``fn``: a Python function's own signature; for a built-in, those of its
    ``aten`` schema (the first overload's), as torch's argument parser binds them: ``self`` is ``input``
    in a function (``torch.svd(input=x)``), ``self`` in a method. (``torch.overrides``' stand-in lambdas
    are no source: some spell ``torch.linalg.svd``'s ``A`` as ``input``.)"""
    import types

    import torch

    sig = _signature(fn)
    name = getattr(fn, "__name__", None)
    if sig is not None or not name or name in _SCRIPT_ONLY:
        return sig
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    if not schemas:
        return None
    method = not isinstance(fn, types.BuiltinFunctionType)  # a Tensor method (a method descriptor)
    return inspect.Signature([inspect.Parameter("input" if a.name == "self" and not method else a.name,
                                                _NAMED[bool(a.kwarg_only)]) for a in schemas[0].arguments])


def _positional_names(sig) -> list[str]:
    return [p.name for p in sig.parameters.values() if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]


def renamed_keywords(torch_sig, torchax_sig) -> dict[str, str]:
    """torch's parameter name -> torchax's, for the parameters at the same position that are named
    differently: ``F.linear`` gives ``{'input': 'self', 'weight': 'weights'}``. A name either side also
    uses for another parameter is left alone (a rename would change what the call means)."""
    t_all = {p.name for p in torch_sig.parameters.values() if p.kind in _NAMED}
    j_all = {p.name for p in torchax_sig.parameters.values() if p.kind in _NAMED}
    pairs = zip(_positional_names(torch_sig), _positional_names(torchax_sig))
    return {t: j for t, j in pairs if t != j and t not in j_all and j not in t_all}


def _op_name(fn) -> str:
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{name}" if mod else name


def keyword_gaps(env) -> list[tuple[str, dict[str, str]]]:
    """``(torch function, {torch's name: torchax's name})`` for every torch function torchax implements
    itself under parameter names other than torch's, in name order."""
    return sorted((_op_name(fn), renames) for fn, _, renames in _renamings(env))


def _renamings(env):
    import torch

    for fn, op in list(env._ops.items()):
        if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            continue  # aten overloads are called positionally by the dispatcher
        t_sig, j_sig = _torch_signature(fn), _signature(op.func)
        if t_sig is None or j_sig is None:
            continue
        renames = renamed_keywords(t_sig, j_sig)
        if renames:
            yield fn, op, renames


def _taking(func, renames: dict[str, str]):
    @functools.wraps(func)
    def call(*args, **kwargs):
        for t, j in renames.items():
            if t in kwargs:
                kwargs[j] = kwargs.pop(t)
        return func(*args, **kwargs)

    call._mhlo_cost_renames = renames
    return call


def accept_torch_keywords(env) -> None:
    """Let torchax's own implementations of torch functions take torch's keyword names (see
    :func:`renamed_keywords`); each is wrapped once."""
    for fn, op, renames in list(_renamings(env)):
        if getattr(op.func, "_mhlo_cost_renames", None) is None:
            env._ops[fn] = dataclasses.replace(op, func=_taking(op.func, renames))

"""Import torchax on torch versions that dropped the named-tensor (``Dimname``) operator overloads.

torchax (0.0.13) names a few ``aten`` overloads at import time (``aten.prod.dim_Dimname`` in its AMP
policy table; ``aten.index_fill.Dimname_*``, ``aten.unbind.Dimname``, ``aten.norm.names_*``,
``aten.std.names_dim``... in its decomposition list). torch 2.13 removed those overloads, so
``torch.ops.aten.prod.dim_Dimname`` raises AttributeError and ``import torchax`` fails. While torchax imports, :func:`import_torchax` lets a lookup of a missing
named-tensor overload return an inert placeholder: a hashable object that is no ``OperatorBase``, so
``torch._decomp.get_decompositions`` skips it and the AMP table holds a key nothing ever matches.
Any other missing overload still raises. The patch is undone once torchax is imported and its default
environment (which loads the operator and decomposition tables) is built.
"""
from __future__ import annotations

import contextlib
import importlib
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
    import torch  # noqa: F401  (the shim patches torch's op packets)

    # A failed earlier ``import torchax`` leaves partially initialised torchax.* modules behind: drop them.
    if mod is None or not hasattr(mod, "default_env"):
        for name in [n for n in sys.modules if n == "torchax" or n.startswith("torchax.")]:
            del sys.modules[name]
    with tolerate_removed_dimname_overloads():
        mod = importlib.import_module("torchax")
        mod.default_env()  # loads torchax.ops.* and torchax.decompositions
    mod._mhlo_cost_ready = True
    return mod

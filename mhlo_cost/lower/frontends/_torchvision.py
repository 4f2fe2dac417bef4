"""timm without torchvision: a stand-in for the one torchvision class timm's model code imports.

timm imports ``torchvision.ops.misc.FrozenBatchNorm2d`` when it is imported (``timm.layers``,
``timm.utils``), and nothing else of torchvision to build a model (its data pipeline needs more, which
lowering never touches, though ``import timm`` imports it). PyPI has no CPU build of torchvision: its
wheel links CUDA torch and does not load beside the CPU torch wheel. Where ``import torchvision`` finds
no package, :func:`import_timm` lets timm's import find a stand-in: hollow modules whose names are inert
placeholder classes (they refuse to be instantiated), except ``torchvision.ops.misc.FrozenBatchNorm2d``,
our own (batch norm with fixed statistics, the same buffers). ``import timm`` and every model it builds
work; once timm is imported the stand-in is gone. A torchvision that is installed is always used as it
is; one that is installed but does not load is reported with what to do.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from . import FrontendError

STANDIN_VERSION = "0+mhlo-cost-standin"


def _frozen_batch_norm():
    import torch

    class FrozenBatchNorm2d(torch.nn.Module):
        """Batch normalisation over channels (dim 1) with fixed statistics and affine terms, all buffers."""

        def __init__(self, num_features: int, eps: float = 1e-5):
            super().__init__()
            self.eps = eps
            for name, fill in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
                self.register_buffer(name, torch.full((num_features,), fill))

        def forward(self, x):
            shape = (1, -1) + (1,) * (x.dim() - 2)
            scale = self.weight * torch.rsqrt(self.running_var + self.eps)
            shift = self.bias - self.running_mean * scale
            return x * scale.reshape(shape) + shift.reshape(shape)

        def extra_repr(self) -> str:
            return f"{self.weight.shape[0]}, eps={self.eps}"

    FrozenBatchNorm2d.__module__ = "torchvision.ops.misc"
    return FrozenBatchNorm2d


class _Placeholder(type):
    """A torchvision name timm refers to but lowering never uses: an inert class (subclassable, hashable,
    its attributes placeholders too) that refuses to be instantiated."""

    _cache: dict = {}

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(f"torchvision is not installed: {cls.__module__}.{cls.__qualname__} needs it (the "
                           "mhlo-cost stand-in only lets timm build models)")


def _placeholder(qualname: str, module: str = "torchvision") -> type:
    key = (module, qualname)
    if key not in _Placeholder._cache:
        cls = _Placeholder(qualname.rsplit(".", 1)[-1], (), {"__module__": module, "__qualname__": qualname})
        _Placeholder._cache[key] = cls
    return _Placeholder._cache[key]


class _HollowModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(name, self.__name__)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of ``torchvision`` and its submodules give hollow modules (``ops.misc`` holds the real
    FrozenBatchNorm2d)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _HollowModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []
        if module.__name__ == "torchvision":
            module.__version__ = STANDIN_VERSION
        elif module.__name__ == "torchvision.ops.misc":
            module.FrozenBatchNorm2d = _frozen_batch_norm()


_FINDER = _Finder()


def _drop_torchvision_modules() -> None:
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]


def import_timm():
    """``import timm``, with the stand-in where no torchvision is installed. The stand-in is there only
    while timm imports (timm keeps what it took from it): afterwards ``import torchvision`` fails again
    and other libraries (transformers) see no torchvision, as is true. An installed torchvision that does
    not load is a FrontendError saying what to do."""
    if "timm" in sys.modules:
        return sys.modules["timm"]
    if importlib.util.find_spec("torchvision") is not None:
        _check_loads()
        return importlib.import_module("timm")
    sys.meta_path.append(_FINDER)
    try:
        timm = importlib.import_module("timm")
        importlib.import_module("timm.models")
    finally:
        sys.meta_path.remove(_FINDER)
        _drop_torchvision_modules()
    timm._mhlo_cost_torchvision = STANDIN_VERSION
    return timm


def _check_loads() -> None:
    try:
        importlib.import_module("torchvision")
    except Exception as e:  # a CUDA build beside CPU torch: "operator torchvision::nms does not exist"
        _drop_torchvision_modules()
        import torch

        raise FrontendError(
            f"torchvision is installed but does not load beside torch {torch.__version__} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); install the torchvision build "
            "that matches this torch, or uninstall it (pip uninstall torchvision): timm then works without it"
        ) from None

"""mhlo-cost: what a model costs, block by block, from its MHLO / StableHLO IR.

The names below load on first use (PEP 562), so that ``mhlo-cost --version`` or ``--help`` imports neither
jax nor pandas.
"""

__version__ = "0.1.0"

import os as _os

# XLA's C++ INFO lines ("PjRt-IFRT device count ...") on the first lowering mean nothing to a user; the
# level is read once, when jaxlib loads, so it is set here. Warnings and errors still show.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

#: name -> the module that defines it
_LAZY = {"Analysis": "analysis", "analyze": "analysis", "LoadError": "ir.loader", "load": "ir.loader",
         "AnalysisError": "walk.row", "AnalysisOptions": "walk.options", "lower_model": "lower.frontends.api",
         "Study": "studies.study", "StudyOptions": "studies.study", "compose": "studies.compose",
         "ViewRequest": "views.table"}

__all__ = ["Analysis", "AnalysisError", "AnalysisOptions", "LoadError", "Study", "StudyOptions", "ViewRequest",
           "analyze", "compose", "load", "lower_model", "__version__"]

#: Modules that moved into the wings in 0.2.0 (CHANGELOG.md): old name (and everything under it) -> new name.
#: Importing an old name warns (DeprecationWarning) and gives the new module; the old names go in 0.3.0.
MOVED = {
    "loader": "ir.loader", "formats": "ir.formats", "types": "ir.types", "tensorinfo": "ir.tensorinfo",
    "files": "files.read", "outtext": "files.outtext",
    "visitors": "walk", "visitors.tflops": "walk.matrix", "visitors.comm": "walk.collective",
    "collectors": "analysis.collectors", "blocks": "analysis.blocks", "series": "analysis.series",
    "training.analysis": "analysis.training", "training.argument": "walk.arguments", "memory.views": "roofline.memory",
    "hardware": "machines.hardware", "hardware_profile": "machines.profile", "hardware_toml": "machines.catalogue",
    "gemm": "machines.gemm", "kernel_model": "machines.kernels", "limits": "machines.limits",
    "accuracy": "machines.accuracy",
    "lowering": "lower.run", "frontends": "lower.frontends", "models": "lower.models", "training": "lower.training",
    "inference.steps": "lower.inference.steps", "inference.gpt_steps": "lower.inference.gpt_steps",
    "inference.hf_steps": "lower.inference.hf_steps", "inference.cache": "lower.inference.cache",
    "html": "views.html", "plot": "views.plot", "report": "views.text", "headline": "views.headline",
    "figures": "views.figures", "units": "views.units", "sweep.plot": "views.sweep_plot",
    "scale.html": "views.html.plan", "inference.views": "views.serve",
    "study": "studies.study", "baseline": "studies.baseline", "sweep": "studies.sweep", "inference": "studies.serve",
    "scale": "studies.plan",
}


def moved_to(name: str) -> str | None:
    """The module that ``mhlo_cost.<name>`` moved to (the longest old prefix that matches), or None."""
    head = name
    while head:
        if head in MOVED:
            return MOVED[head] + name[len(head):]
        head = head.rpartition(".")[0]
    return None


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _install_moved_finder() -> None:
    """Old module names keep working for one release, with a warning (see :data:`MOVED`)."""
    import importlib.machinery  # (not importlib.abc: it imports importlib.resources, tempfile, typing: 20-40 ms of
    import sys                  # every start, the reader child's too; a meta path finder needs no base class)
    import types

    class Alias(types.ModuleType):
        """The old name of a module: every attribute read from the new one."""

        def __getattr__(self, attr):
            return getattr(self.__dict__["_target"], attr)

        def __dir__(self):
            return dir(self.__dict__["_target"])

    class Finder:
        def find_spec(self, fullname, path=None, target=None):
            prefix = __name__ + "."
            if not fullname.startswith(prefix):
                return None
            new = moved_to(fullname[len(prefix):])
            if new is None:
                return None
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.loader_state = prefix + new
            return spec

        def create_module(self, spec):
            import importlib
            import warnings

            warnings.warn(f"{spec.name} is now {spec.loader_state}; the old name goes in mhlo-cost 0.3.0",
                          DeprecationWarning, stacklevel=2)
            module = Alias(spec.name)
            module.__dict__["_target"] = importlib.import_module(spec.loader_state)
            return module

        def exec_module(self, module):
            pass

    if not any(type(f).__name__ == "Finder" and getattr(f, "_mhlo_cost", False) for f in sys.meta_path):
        finder = Finder()
        finder._mhlo_cost = True
        sys.meta_path.append(finder)


_install_moved_finder()

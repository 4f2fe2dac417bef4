"""Which function a walk starts at: :func:`choose_entry`."""
from __future__ import annotations

from jaxlib.mlir import ir

from .row import AnalysisError


def choose_entry(functions: dict, entry: str | None) -> str:
    """The function the walk starts at: ``entry``, ``main``, the only public function, or the only function."""
    if not functions:
        raise AnalysisError("the module has no func.func to analyse")
    if entry is not None:
        if entry not in functions:
            raise AnalysisError(f"no function named {entry!r}; functions: {', '.join(sorted(functions))}")
        return entry
    if "main" in functions:
        return "main"
    public = [n for n, f in functions.items() if not _is_private(f)]
    if len(public) == 1:
        return public[0]
    if len(functions) == 1:
        return next(iter(functions))
    if not public:
        raise AnalysisError(f"no function named 'main' and no public function; choose one of "
                            f"{', '.join(sorted(functions))} with --entry NAME")
    raise AnalysisError(
        "no function named 'main' and several public functions "
        f"({', '.join(sorted(public))}); choose one with --entry NAME"
    )


def _is_private(fn: ir.Operation) -> bool:
    vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
    return vis is not None and ir.StringAttr(vis).value == "private"

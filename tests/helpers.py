"""What several test files build the same way: tensor types and rule contexts by hand, small JAX programs lowered to
text, the command line run in this process, the two-call program the walk and its recorders are checked on, and the
repository's scripts (benchmarks, generators) loaded as modules."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from mhlo_cost.cli import main
from mhlo_cost.ir.tensorinfo import TensorInfo
from mhlo_cost.walk.optable import ModuleFacts, OpContext
from mhlo_cost.walk.options import AnalysisOptions


def tensor(shape, dtype="f32", size=4) -> TensorInfo:
    """A tensor type by hand: ``shape``, ``dtype``, ``size`` bytes per element."""
    n = 1
    for d in shape:
        n *= d
    return TensorInfo.make(tuple(shape), dtype, n, n * size)


def context(name, operands, result, attrs=None, *, options=None, module=ModuleFacts(), bodies=()) -> OpContext:
    """A rule's context built by hand: no module is parsed and no walk exists (``result``: one type, or a tuple)."""
    results = result if isinstance(result, tuple) else (result,)
    return OpContext(name, tuple(operands), result, {} if attrs is None else attrs, options or AnalysisOptions(),
                     sum(t.nbytes for t in operands), sum(t.nbytes for t in results), bodies, module)


def lowered(f, *shapes, donate=(), debug_info=True) -> str:
    """``f`` lowered by ``jax.jit`` for arguments of ``shapes`` ((shape, dtype) pairs), as MLIR text."""
    import jax

    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    return jax.jit(f, donate_argnums=donate).lower(*args).as_text(debug_info=debug_info)


def run_cli(args, capsys) -> tuple[int, str, str]:
    """``mhlo-cost args`` in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def two_calls(m: int, k: int) -> str:
    """``main`` calls ``@layer`` twice, each time an (m x k) @ (k x k) dot and a tanh of it (a callee's rows are built
    once and replayed at the second call)."""
    return f"""
func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{k}xf32>) -> tensor<{m}x{k}xf32> {{
  %0 = func.call @layer(%x, %w) : (tensor<{m}x{k}xf32>, tensor<{k}x{k}xf32>) -> tensor<{m}x{k}xf32>
  %1 = func.call @layer(%0, %w) : (tensor<{m}x{k}xf32>, tensor<{k}x{k}xf32>) -> tensor<{m}x{k}xf32>
  return %1 : tensor<{m}x{k}xf32>
}}
func.func private @layer(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{k}xf32>) -> tensor<{m}x{k}xf32> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{k}xf32>) -> tensor<{m}x{k}xf32>
  %1 = stablehlo.tanh %0 : tensor<{m}x{k}xf32>
  return %1 : tensor<{m}x{k}xf32>
}}
"""


def call_chain(n: int) -> str:
    """``@main`` calls ``@f0``, each ``@fi`` adds its argument to itself (4 elements) and calls ``@f(i+1)``: every
    function's table holds its callees' rows (quadratic in ``n`` over all of them)."""
    t = "tensor<4xf32>"
    lines = ["module {", f"  func.func @main(%a: {t}) -> {t} {{", f"    %r = func.call @f0(%a) : ({t}) -> {t}",
             f"    return %r : {t}", "  }"]
    for i in range(n):
        lines += [f"  func.func private @f{i}(%x: {t}) -> {t} {{", f"    %y = stablehlo.add %x, %x : {t}",
                  f"    %r = func.call @f{i + 1}(%y) : ({t}) -> {t}", f"    return %r : {t}", "  }"]
    lines += [f"  func.func private @f{n}(%x: {t}) -> {t} {{", f"    return %x : {t}", "  }", "}"]
    return "\n".join(lines) + "\n"


def script(path: str, name: str | None = None):
    """The repository's script at ``path`` (relative to the root, e.g. ``benchmarks/validate_training.py``) run as
    module ``name`` (default: the file's stem), registered in ``sys.modules`` (a dataclass looks its module up)."""
    file = Path(__file__).resolve().parents[1] / path
    spec = importlib.util.spec_from_file_location(name or file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module

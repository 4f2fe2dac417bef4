"""What a library GEMM Inductor calls (cuBLAS through ``extern_kernels.mm`` / ``addmm`` / ``_scaled_mm``) takes
into its call, beside the dot: its bias and output cast (:func:`_epilogue`), and an fp8 ``_scaled_mm``'s scales
(:func:`_scale_epilogue`). Used by :mod:`.inductor`'s grouping."""
from __future__ import annotations

from ..walk.row import short_name


def _epilogue(rows, producers, role, i: int) -> bool:
    """What a library GEMM takes into its call: an ``add`` of a broadcast of a smaller operand (``addmm``'s bias)
    or a narrowing ``convert`` of its result (the output dtype of the GEMM: a JAX dot accumulating in f32)."""
    r = rows[i]
    if short_name(r.op) == "convert" and r.operands and hasattr(r.result, "nbytes"):
        return r.result.nbytes < r.operands[0].nbytes
    if short_name(r.op) != "add":
        return False
    for p in producers[i]:
        if isinstance(p, int) and role[p] == "dup" and rows[p].operands and \
                rows[p].operands[0].nelems < getattr(rows[p].result, "nelems", 0):
            return True
    return False


def _scale_epilogue(rows, producers, role, head: int, i: int) -> bool:
    """``torch._scaled_mm``'s own scaling: a ``multiply`` of an fp8 GEMM's result by a broadcast 0-d scale.
    torchao's tensorwise float8 matmul (``addmm_float8_unwrapped``, torchao/float8/float8_python_api.py at
    eab345c, torchtitan's 2024-12 tables) passes both inverse scales to the one ``_scaled_mm`` call with
    ``out_dtype``: cuBLASLt applies them and the output cast in its epilogue. Row-wise scales are not 0-d and are
    priced multiplied in after the call, a kernel of their own: ESTIMATE, an upper bound for the forward's GEMM.
    At eab345c ``addmm_float8_unwrapped`` multiplies after the call only where the scales are row-wise and
    ``use_fast_accum`` is off, which holds for the backward's GEMMs (``gemm_config_grad_input`` /
    ``gemm_config_grad_weight``), not the forward's: torchao/float8/config.py's ``gemm_config_output`` sets
    ``use_fast_accum=True``, so its row-wise scales go into ``_scaled_mm`` (the phase is not known here)."""
    r, h = rows[i], rows[head]
    if short_name(r.op) != "multiply" or not (h.gemm_flops and h.operands):
        return False
    if not all(str(getattr(x, "dtype", "")).startswith("f8") for x in h.operands[:2]):
        return False
    for p in producers[i]:
        if isinstance(p, int) and role[p] == "dup" and rows[p].operands and rows[p].operands[0].nelems == 1:
            return True
    return False


#: Members a library GEMM's call holds at most: the dot, its bias and output cast (:func:`_epilogue`); an fp8
#: ``_scaled_mm`` its two scales besides (:func:`_scale_epilogue`).
EXTERN_MEMBERS, SCALED_MEMBERS = 3, 5

"""The attributes that say how a view rearranges its operand, as the walk reads them (issue 35): :class:`LayoutRecorder`
records, per row, what a row does not carry but the eager model needs to follow a tensor's strides as PyTorch does
(:mod:`mhlo_cost.roofline.strides`): a ``transpose``'s permutation, a ``broadcast_in_dim``'s dimensions, a
``slice``'s steps and a ``dot_general``'s batching and contracting dimensions. Asked for with
``AnalysisOptions(records=("layouts",))``; the record is ``{row index: fact}`` (plain tuples: it crosses to the
caller as it is)."""
from __future__ import annotations

from ..ir.bindings import mhlo, stablehlo  # (the native extensions: not the generated op classes, 50-100 ms)
from .masks import _ints
from .recorder import RowFactRecorder

#: The ops whose facts are recorded (the row's op name ends with one of these).
_WATCHED = (".transpose", ".broadcast_in_dim", ".slice", ".dot_general")
_ATTR = {"transpose": ("permutation", "perm"), "broadcast_in_dim": ("broadcast_dimensions", "dims"),
         "slice": ("strides", "step")}


def _dot(attr) -> tuple | None:
    for cls in (stablehlo.DotDimensionNumbers, mhlo.DotDimensionNumbers):
        if cls.isinstance(attr):
            d = cls(attr)
            return ("dot", (tuple(d.lhs_batching_dimensions), tuple(d.lhs_contracting_dimensions)),
                    (tuple(d.rhs_batching_dimensions), tuple(d.rhs_contracting_dimensions)))
    return None


def layout_fact(op, name: str):
    """The fact of ``op`` (its short name ``name``), or None: ``("perm", (0, 2, 1))``, ``("dims", (0, 2))``,
    ``("step", (1, 2))``, ``("dot", (lhs batch, lhs contracting), (rhs batch, rhs contracting))``."""
    attrs = op.attributes
    if name == "dot_general":
        return _dot(attrs["dot_dimension_numbers"]) if "dot_dimension_numbers" in attrs else None
    attr, tag = _ATTR.get(name, (None, None))
    if attr is None or attr not in attrs:
        return None
    vals = _ints(attrs[attr])
    return None if vals is None else (tag, vals)


class LayoutRecorder(RowFactRecorder, record="layouts"):
    """Per row index, the fact (:func:`layout_fact`) of each transpose, broadcast_in_dim, slice and dot_general;
    rows a call, loop or branch replays get their original's fact."""

    def fact(self, op, row) -> tuple | None:
        name = row.op
        return layout_fact(op, name.rsplit(".", 1)[1]) if name.endswith(_WATCHED) else None

"""What an index mask is made of, as the walk reads it (issue 25): :class:`MaskRecorder` records, per row, the
attributes a row does not carry but an attention's mask is read from (:mod:`mhlo_cost.roofline.band`): a
``compare``'s direction, an ``iota``'s dimension, a ``broadcast_in_dim``'s dimensions (integer and boolean
results only), and the value of an integer splat ``constant``. Asked for with ``AnalysisOptions(records=
("masks",))``; the record is ``{row index: fact}`` (plain values: it crosses to the caller as it is)."""
from __future__ import annotations

from jaxlib.mlir import ir

from .recorder import RowFactRecorder
from .trips import comparison_direction

#: The ops whose facts are recorded (the row's op name ends with one of these).
_WATCHED = (".compare", ".iota", ".broadcast_in_dim", ".constant")


def _ints(attr) -> tuple | None:
    for cls in (ir.DenseI64ArrayAttr, ir.DenseIntElementsAttr):
        try:
            return tuple(int(x) for x in cls(attr))
        except (ValueError, TypeError):
            continue
    return None


def _splat_int(attr) -> int | None:
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except (ValueError, TypeError):
        return None
    if not dense.is_splat:
        return None
    return int(dense.get_splat_value().value)


def fact_of(op, name: str):
    """The fact of ``op`` (its short name ``name``), or None: ``("compare", "GE")``, ``("iota", 0)``,
    ``("dims", (0, 1))``, ``("int", 512)``."""
    attrs = op.attributes
    if name == "compare" and "comparison_direction" in attrs:
        d = comparison_direction(attrs["comparison_direction"])
        return None if d is None else ("compare", d)
    if name == "iota" and "iota_dimension" in attrs:
        return ("iota", ir.IntegerAttr(attrs["iota_dimension"]).value)
    if name == "broadcast_in_dim" and "broadcast_dimensions" in attrs:
        dims = _ints(attrs["broadcast_dimensions"])
        return None if dims is None else ("dims", dims)
    if name == "constant" and "value" in attrs:
        v = _splat_int(attrs["value"])
        return None if v is None else ("int", v)
    return None


def _integral(row) -> bool:
    res = row.result
    dtype = getattr(res, "dtype", "")
    return dtype.startswith(("i", "ui"))


class MaskRecorder(RowFactRecorder, record="masks"):
    """Per row index, the fact (:func:`fact_of`) of each compare, iota, integer broadcast and integer constant;
    rows a call, loop or branch replays get their original's fact."""

    def fact(self, op, row) -> tuple | None:
        name = row.op
        if not name.endswith(_WATCHED) or not _integral(row):
            return None
        return fact_of(op, name.rsplit(".", 1)[1])

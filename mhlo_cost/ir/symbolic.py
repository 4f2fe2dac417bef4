"""Symbolic programs (jax.export shape polymorphism): what makes one, and its symbols.

``jax.export`` with symbolic dimensions (``jax.export.symbolic_shape("b, s")``) writes a public ``main`` whose
arguments have ``?`` dimensions; it reads the dimension variables off them (``stablehlo.get_dimension_size``),
checks them (``shape_assertion`` custom calls) and passes them to the wrapped function, whose leading
``tensor<i32>`` arguments carry the symbol's name in ``jax.global_constant`` (that is where jax records the
names). :func:`symbols` finds, for each symbol, the ``(argument, dimension)`` places of ``main`` it sizes
(:mod:`mhlo_cost.ir.refine` binds them to integers). Symbols of a module with ``?`` dimensions but no jax names are
named ``arg<I>_<D>`` (argument I, dimension D of ``main``).
"""
from __future__ import annotations

from dataclasses import dataclass

#: the attribute jax puts on a module exported with symbolic dimensions
POLY_ATTR = "jax.uses_shape_polymorphism"


class SymbolicError(ValueError):
    """A symbolic program that cannot be bound as asked; ``str`` is one line for a user."""


@dataclass(frozen=True)
class Symbols:
    """``places[name]``: the (argument, dimension) pairs of ``main`` that the symbol sizes, in program order;
    ``named_by``: ``module`` (jax.global_constant) or ``position`` (arg<I>_<D>)."""
    places: dict
    named_by: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.places)


def is_symbolic(module) -> bool:
    """Whether the module's entry has a ``?`` dimension (or jax marked it shape-polymorphic)."""
    from jaxlib.mlir import ir

    attrs = module.operation.attributes
    if POLY_ATTR in attrs and _true(attrs[POLY_ATTR]):
        return True  # (jax writes ``jax.uses_shape_polymorphism = false`` on every static export)
    main = main_function(module)
    return main is not None and any_dynamic(
        ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).inputs)


def _true(attr) -> bool:
    """Whether a module attribute is a true BoolAttr (anything else: not a mark of shape polymorphism)."""
    from jaxlib.mlir import ir

    try:
        return bool(ir.BoolAttr(attr).value)
    except ValueError:
        return False


def ranked_type(t):
    """``t`` as a RankedTensorType, None for another type."""
    from jaxlib.mlir import ir

    try:
        return ir.RankedTensorType(t)
    except ValueError:
        return None


def any_dynamic(types) -> bool:
    """Whether any of ``types`` is a ranked tensor with a dynamic (``?``) dimension."""
    return any((r := ranked_type(t)) is not None and not r.has_static_shape for t in types)


def main_function(module):
    """The module's ``func.func @main``, None where it has none."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and "sym_name" in op.attributes:
            from jaxlib.mlir import ir

            if ir.StringAttr(op.attributes["sym_name"]).value == "main":
                return op
    return None


def _source(value):
    """(argument number, dimension) where ``value`` is ``get_dimension_size`` of a block argument of ``main``
    (through converts and reshapes of a scalar), else None."""
    from jaxlib.mlir import ir

    while True:
        owner = value.owner
        if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
            owner = owner.operation
        if not isinstance(owner, ir.Operation):
            return None
        name = owner.name
        if name in ("stablehlo.convert", "stablehlo.reshape", "mhlo.convert", "mhlo.reshape"):
            value = owner.operands[0]
            continue
        if name in ("stablehlo.get_dimension_size", "mhlo.get_dimension_size"):
            arg = owner.operands[0].maybe_downcast()
            if not isinstance(arg, ir.BlockArgument):
                return None
            return arg.arg_number, ir.IntegerAttr(owner.attributes["dimension"]).value
        return None


def _equalities(main) -> list:
    """(value, value) pairs ``compare EQ`` relates in main's body (the shape assertions' equal dimensions)."""
    pairs = []
    for op in main.regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("stablehlo.compare", "mhlo.compare") and "EQ" in str(op.attributes["comparison_direction"]):
            pairs.append((op.operands[0], op.operands[1]))
    return pairs


def symbols(module) -> Symbols:
    """The symbols of a symbolic ``module`` and the places of ``main``'s arguments each one sizes."""
    from jaxlib.mlir import ir

    main = main_function(module)
    if main is None:
        raise SymbolicError("a symbolic program without a function named main: cannot bind its dimensions")
    body = main.regions[0].blocks[0]
    places: dict = {}
    for op in body.operations:
        op = op.operation
        if op.name != "func.call":
            continue
        callee = _lookup(module, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        names = global_constants(callee) if callee is not None else {}
        for i, name in names.items():
            if not name:  # (jax's helpers of dimension arithmetic, divmod and the like: anonymous)
                continue
            place = _source(op.operands[i])
            if place is None:
                raise SymbolicError(f"shape symbol {name!r} is not the size of one of main's dimensions (an "
                                    f"expression such as 2*{name}?): cannot bind it from --shapes")
            places.setdefault(name, [])
            if place not in places[name]:
                places[name].append(place)
    _spread(places, main)
    if places:
        return Symbols({k: tuple(v) for k, v in places.items()}, "module")
    return _by_position(main)


def _spread(places: dict, main) -> None:
    """Add to each symbol's places the dimensions main's shape assertions say are equal to one of them, until
    none is added (a chain ``a == b``, ``b == c`` in any order)."""
    pairs = [(_source(a), _source(b)) for a, b in _equalities(main)]
    grown = True
    while grown:
        grown = False
        for pa, pb in pairs:
            for where in places.values():
                for p, q in ((pa, pb), (pb, pa)):
                    if p in where and q is not None and q not in where:
                        where.append(q)
                        grown = True


def _by_position(main) -> Symbols:
    from jaxlib.mlir import ir

    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    places = {}
    for i, t in enumerate(ftype.inputs):
        t = ranked_type(t)
        if t is not None:
            for d in range(t.rank):
                if t.is_dynamic_dim(d):
                    places[f"arg{i}_{d}"] = ((i, d),)
    return Symbols(places, "position")


def _lookup(module, name: str):
    from jaxlib.mlir import ir

    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def global_constants(func) -> dict:
    """{argument number: symbol name} of a function's ``jax.global_constant`` arguments."""
    from jaxlib.mlir import ir

    if "arg_attrs" not in func.attributes:
        return {}
    out = {}
    for i, attrs in enumerate(ir.ArrayAttr(func.attributes["arg_attrs"])):
        attrs = ir.DictAttr(attrs)
        if "jax.global_constant" in attrs:
            out[i] = ir.StringAttr(attrs["jax.global_constant"]).value
    return out


def describe(found: Symbols) -> str:
    """``b, s (named in the module)`` for a message."""
    how = "named in the module" if found.named_by == "module" else "main's ?-dimensions, named arg<I>_<D>"
    return f"{', '.join(found.names)} ({how})"


def show_point(point: dict) -> str:
    """``b=2,s=128``: a point of the symbols, for a message."""
    return ",".join(f"{k}={v}" for k, v in point.items())

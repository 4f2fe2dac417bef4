"""A symbolic program made static at a point of its symbols, by StableHLO's own shape refinement.

:func:`refine` gives ``main`` static argument types at the point (each argument converted back to its old dynamic
type, as ``Exported.call`` does when it inlines a module), makes the functions' dimension arguments
(``jax.global_constant``) constants, and runs jaxlib's StableHLO passes ``stablehlo-refine-shapes`` and
``stablehlo-canonicalize-dynamism``, which make every shape static. jax's own ``refine_polymorphic_shapes``
inlines every function and folds first, which changes what is counted (a callee's ops, merged constants); so it
is not used, and what the passes leave that a static lowering has not is taken back: the shape assertions
(checked: one that fails at the point is an error), the dimension variables' arithmetic nothing reads, the
identity converts, and constants merged and hoisted by the rewriter (one per use again, before it). The module
then counts exactly as the static lowering at that point (tests/test_formula.py). A ``?`` dimension that is no
plain symbol (``2*b``) is refused.
"""
from __future__ import annotations

from .degree import all_ops
from .symbolic import (POLY_ATTR, SymbolicError, Symbols, any_dynamic, describe, global_constants, main_function,
                       ranked_type, show_point, symbols)


#: The largest dimension an MLIR tensor type holds (int64).
MAX_DIMENSION = 2 ** 63 - 1


def refine(module, point: dict, context):
    """The static module ``module`` becomes at ``point`` ({symbol: int}), parsed in ``context``; SymbolicError
    where a symbol lacks a value, a name is not the module's, a dimension is no plain symbol, or jaxlib's
    refinement (and the module's shape assertions) refuse the point."""
    import io

    from jaxlib.mlir import ir

    found = symbols(module)
    unknown = sorted(set(point) - set(found.names))
    if unknown:
        raise SymbolicError(f"--shapes names {', '.join(unknown)}: the program's symbols are {describe(found)}")
    missing = [n for n in found.names if n not in point]
    if missing:
        raise SymbolicError(f"no value for shape symbol(s) {', '.join(missing)}: the program's symbols are "
                            f"{describe(found)}")
    bad = [n for n in found.names if isinstance(point[n], bool) or not isinstance(point[n], int)
           or not 1 <= point[n] <= MAX_DIMENSION]
    if bad:
        raise SymbolicError(f"shape symbol {bad[0]}={point[bad[0]]}: a dimension is a whole number in [1, 2**63 - 1] "
                            "(MLIR's dimensions are 64-bit)")
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    with context, ir.Location.unknown():
        work = ir.Module.parse(buf.getvalue())
        _bind_main(work, found, point)
        _fold_dimension_arguments(work, point)
        try:
            _refine_pipeline().run(work.operation)
        except Exception as e:  # noqa: BLE001 (MLIR's diagnostic says why; one line of it)
            text = " ".join(str(e).split())
            raise SymbolicError(f"shape refinement at {show_point(point)} failed: {text[:300]}") from None
        _check_assertions(work, point)
        _drop_identity_converts(work)
        _drop_dead(work)
        _unshare_constants(work)
        if POLY_ATTR in work.operation.attributes:  # (static now: walked as the static program it is)
            del work.operation.attributes[POLY_ATTR]
    if _dynamic_anywhere(work):
        raise SymbolicError(f"shapes are still dynamic after refinement at {show_point(point)}: a dimension the "
                            "symbols do not decide")
    return work


def _refine_pipeline():
    """StableHLO's own shape refinement (specialising the functions main calls, the dimension arguments made
    constants) and its dynamism canonicalisation (dynamic_broadcast_in_dim -> broadcast_in_dim, ...): jaxlib's
    passes, without the inliner and folding jax's whole pipeline adds (they would change what is counted)."""
    from jaxlib.mlir import passmanager
    from jaxlib.mlir.dialects import stablehlo

    stablehlo.register_stablehlo_passes()
    return passmanager.PassManager.parse(
        "builtin.module(stablehlo-refine-shapes,func.func(stablehlo-canonicalize-dynamism))")


def _fold_dimension_arguments(module, point: dict) -> None:
    """Make every function's dimension arguments (``jax.global_constant``) constants at ``point`` and drop them
    from the function and its call sites: what shape refinement would do, done first so that it refines each
    function once, by its operand types alone (jax's own pipeline inlines every function instead, which would
    change what is counted)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func as func_d
    from jaxlib.mlir.dialects import stablehlo

    folded = {}
    for fn in module.body.operations:
        dims = global_constants(fn) if fn.operation.name == "func.func" else {}
        dims = {i: n for i, n in dims.items() if n}  # (anonymous ones, jax's divmod and the like: refinement's)
        if not dims:
            continue
        missing = [n for n in dims.values() if n not in point]
        if missing:
            raise SymbolicError(f"dimension argument(s) {', '.join(missing)} of a function are no symbol of main")
        block = fn.regions[0].blocks[0]
        for i in sorted(dims, reverse=True):
            scalar = ir.RankedTensorType(block.arguments[i].type)
            width = ir.IntegerType(scalar.element_type).width
            if point[dims[i]] >= 1 << (width - 1):  # (it wrapped to a negative size: a cryptic refinement error)
                raise SymbolicError(f"shape symbol {dims[i]}={point[dims[i]]} does not fit the program's i{width} "
                                    f"dimension variables (at most {(1 << (width - 1)) - 1:,})")
            with ir.InsertionPoint.at_block_begin(block):
                const = stablehlo.ConstantOp(ir.DenseElementsAttr.get_splat(
                    scalar, ir.IntegerAttr.get(scalar.element_type, int(point[dims[i]]))))
            block.arguments[i].replace_all_uses_with(const.result)
            block.erase_argument(i)
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        keep = [j for j in range(len(ftype.inputs)) if j not in dims]
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([ftype.inputs[j] for j in keep],
                                                                              ftype.results))
        attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[j] for j in keep])
        folded[ir.StringAttr(fn.attributes["sym_name"]).value] = keep

    for op in all_ops(module):
        if op.name != "func.call" or ir.FlatSymbolRefAttr(op.attributes["callee"]).value not in folded:
            continue
        keep = folded[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
        with ir.InsertionPoint(op), op.location:
            new = func_d.CallOp([r.type for r in op.results], ir.FlatSymbolRefAttr(op.attributes["callee"]).value,
                                [op.operands[j] for j in keep])
        for old, got in zip(op.results, new.results):
            old.replace_all_uses_with(got)
        op.erase()


def _constant_value(value):
    """The boolean of a scalar ``stablehlo.constant``, None for anything else."""
    from jaxlib.mlir import ir

    owner = value.owner
    op = owner.operation if hasattr(owner, "operation") else owner
    if not isinstance(op, ir.Operation) or op.name != "stablehlo.constant":
        return None
    text = str(op.attributes["value"])
    return True if "true" in text else False if "false" in text else None


def _check_assertions(module, point: dict) -> None:
    """Erase main's shape assertions that hold at ``point``; SymbolicError for one that fails or is not decided."""
    from jaxlib.mlir import ir

    block = main_function(module).regions[0].blocks[0]
    for op in list(block.operations):
        op = op.operation
        if op.name != "stablehlo.custom_call" or "shape_assertion" not in str(op.attributes["call_target_name"]):
            continue
        holds = _constant_value(op.operands[0])
        if holds is not True:
            message = ir.StringAttr(op.attributes["error_message"]).value if "error_message" in op.attributes else ""
            said = message.split(". ")[1] if message.count(". ") > 1 else message
            why = "fails" if holds is False else "is not decided by the symbols"
            raise SymbolicError(f"the program's shape assertion {why} at {show_point(point)}: {said}")
        op.erase()


def _drop_dead(module) -> None:
    """Erase ops in main whose results nothing reads (the dimension variables' arithmetic refinement made
    constant): main of a jax export is a wrapper; the program's own ops are in the function it calls."""
    block = main_function(module).regions[0].blocks[0]
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.operations)):
            op = op.operation
            if (op.results and op.name.startswith("stablehlo.") and op.name != "stablehlo.custom_call"
                    and not op.regions and all(not list(r.uses) and _shape_arithmetic(r.type) for r in op.results)):
                op.erase()
                changed = True


def _unshare_constants(module) -> None:
    """One constant op per using op, placed just before it: shape refinement's rewriter merges equal constants and
    hoists them to the top of their function, where jax's lowering makes one at each use (they count as ops and
    bytes written, and live from where they are made)."""

    for op in all_ops(module):
        if op.name != "stablehlo.constant":
            continue
        users = []
        for use in list(op.results[0].uses):
            if use.owner not in [u for u, _ in users]:
                users.append((use.owner, []))
            next(slots for u, slots in users if u == use.owner).append(use.operand_number)
        for k, (user, slots) in enumerate(users):
            if user.parent != op.parent:  # (a use inside a nested region: left where it is)
                continue
            if k == 0:
                op.move_before(user)
                continue
            twin = op.clone(ip=_before(user))
            for slot in slots:
                user.operands[slot] = twin.results[0]


def _before(op):
    from jaxlib.mlir import ir

    return ir.InsertionPoint(op)


def _shape_arithmetic(t) -> bool:
    """An integer or boolean scalar or vector: the type of a dimension variable's arithmetic."""
    from jaxlib.mlir import ir

    r = ranked_type(t)
    return r is not None and r.rank <= 1 and isinstance(r.element_type.maybe_downcast(), ir.IntegerType)


def _dynamic_anywhere(module) -> bool:
    return any(any_dynamic([v.type for v in list(op.operands) + list(op.results)]) for op in all_ops(module))


def _drop_identity_converts(module) -> None:
    """Erase the converts :func:`_bind_main` put on ``main``'s arguments, identities once refined (a static
    lowering has none: they would count as ops)."""
    main = main_function(module)
    block = main.regions[0].blocks[0]
    args = {a.get_name() for a in block.arguments}  # (values compare by name within one block)
    for op in list(block.operations):
        op = op.operation
        if (op.name == "stablehlo.convert" and op.operands[0].get_name() in args
                and op.operands[0].type == op.results[0].type):
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()


def _bind_main(module, found: Symbols, point: dict) -> None:
    """Give ``main`` static argument types at ``point``; each argument converts back to its dynamic type."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    size = {place: point[name] for name, places in found.places.items() for place in places}
    main = main_function(module)
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    block = main.regions[0].blocks[0]
    inputs = []
    for i, t in enumerate(ftype.inputs):
        if not any_dynamic([t]):
            inputs.append(t)
            continue
        t = ranked_type(t)
        dims = []
        for d in range(t.rank):
            if not t.is_dynamic_dim(d):
                dims.append(t.get_dim_size(d))
            elif (i, d) in size:
                dims.append(int(size[(i, d)]))
            else:
                raise SymbolicError(f"dimension {d} of main's argument {i} ({t}) is no plain shape symbol (an "
                                    "expression such as 2*b?): cannot bind it from --shapes")
        static = ir.RankedTensorType.get(dims, t.element_type, t.encoding)
        arg = block.arguments[i]
        arg.set_type(static)
        with ir.InsertionPoint.at_block_begin(block):
            back = stablehlo.ConvertOp(t, arg)
        arg.replace_all_uses_except(back.result, back.operation)
        inputs.append(static)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, ftype.results))

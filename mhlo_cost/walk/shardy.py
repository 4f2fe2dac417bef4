"""Shardy's explicit collectives: the rules of :data:`SHARDY`.

Shardy IR has global shapes; a value's sharding (``out_sharding`` / ``sharding`` of the op that makes it,
``sdy.sharding`` of an op or a function argument; none: replicated) says over which mesh axes (``sdy.mesh``)
each dimension is split. A collective's per-device volume follows the ring convention of
:mod:`mhlo_cost.walk.collective`, with n the product of the sizes of the axes it works over and S the
per-device buffer (the global bytes over the shards of its sharding, each dimension rounded up):

======================== ====================================== ================= =============
op                       n: product of the axes                 S: per device     volume
======================== ====================================== ================= =============
sdy.all_gather           operand shards / result shards         result            (n-1)/n S
sdy.reduce_scatter       result shards / operand shards         operand           (n-1)/n S
sdy.all_reduce           its ``reduction_axes``                 operand           2(n-1)/n S
sdy.all_to_all           axes that change dimension             operand           (n-1)/n S
sdy.collective_permute   the result's shards (0 if unchanged)   operand           S
sdy.all_slice            (a local slice)                        --                0
======================== ====================================== ================= =============

``sdy.reshard`` is classified from the sharding of its operand and its own: unchanged (free); axes only
added (a local slice, free); axes removed, others kept in place (an all_gather over the removed axes, S the
buffer before any slicing); axes only moving between dimensions (an all_to_all over them); axes only
reordered (a collective_permute). Anything else, or a sharding whose mesh is not found, is an ``unknown``
row, never a zero. These rows' bytes read and written are per device, like their volume.

Every rule is a pure function of its :class:`~mhlo_cost.walk.optable.OpContext`: the meshes are the module's
facts (``ctx.module.meshes``), and the sharding of the operand, which the op that makes it declares, is read by
the rule's ``extra`` (:func:`operand_sharding`) and given to the rule in ``ctx.attrs`` under :data:`OPERAND`.
"""
from __future__ import annotations

from jaxlib.mlir import ir
from ..ir.bindings import sdy

from .ring import ring_volume
from .module_facts import mesh_axes
from .costvalue import Cost, Counted
from .optable import OpContext, RuleTable

#: The key of the operand's sharding (an ``sdy`` sharding attribute, or None: replicated) in ``ctx.attrs``.
OPERAND = "sdy.operand_sharding"


# -- shardings ---------------------------------------------------------------------------------------------------
def _mesh(ctx: OpContext, ref):
    """{axis: size} of the mesh a sharding names (``@mesh``: the module's) or holds; None where not found."""
    try:
        return ctx.module.meshes.get(ir.FlatSymbolRefAttr(ref).value)
    except (ValueError, TypeError):
        try:
            return mesh_axes(sdy.MeshAttr(ref))
        except (ValueError, TypeError):
            return None


def _dims(ctx: OpContext, attr, rank: int):
    """(per-dimension lists of (axis key, size), mesh size) of a sharding attribute; None where unreadable.
    A value without a sharding is replicated."""
    if attr is None:
        return [[] for _ in range(rank)], None
    t = sdy.TensorShardingAttr(attr)
    mesh = _mesh(ctx, t.mesh_or_ref)
    if mesh is None:
        return None
    dims = []
    for d in t.dimension_shardings:
        refs = []
        for a in sdy.DimensionShardingAttr(d).axes:
            a = sdy.AxisRefAttr(a)
            if a.name not in mesh:
                return None
            sub = a.sub_axis_info
            if sub is None:
                refs.append((a.name, mesh[a.name]))
            else:
                sub = sdy.SubAxisInfoAttr(sub)
                refs.append((f"{a.name}:({sub.pre_size}){sub.size}", sub.size))
        dims.append(refs)
    total = 1
    for size in mesh.values():
        total *= size
    return dims, total


def _value_sharding(v: ir.Value):
    owner = v.owner
    if isinstance(owner, ir.Block):
        fn = owner.owner.operation
        if fn.name != "func.func" or "arg_attrs" not in fn.attributes:
            return None
        i = ir.BlockArgument(v).arg_number
        attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
        d = ir.DictAttr(attrs[i]) if i < len(attrs) else None
        return d["sdy.sharding"] if d is not None and "sdy.sharding" in d else None
    op = owner.operation
    for name in ("out_sharding", "sharding"):
        if name in op.attributes:
            return op.attributes[name]
    if "sdy.sharding" in op.attributes:
        per = sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings
        k = ir.OpResult(v).result_number
        return per[k] if k < len(per) else None
    return None


def operand_sharding(op: ir.Operation) -> dict:
    """{:data:`OPERAND`: the sharding of the op's operand}, as the op (or function argument) that makes it says."""
    return {OPERAND: _value_sharding(op.operands[0])}


# -- the rules ---------------------------------------------------------------------------------------------------
SHARDY = RuleTable("shardy")


def _shardy(ctx: OpContext, classify) -> Counted:
    """The count of one Shardy collective; ``classify(src, dst)`` gives (kind, n, the per-dimension axes of the
    buffer that is S) or None."""
    result = ctx.result
    shape = result.shape
    attrs = ctx.attrs
    src = _dims(ctx, attrs[OPERAND], len(shape))
    dst = _dims(ctx, attrs["out_sharding" if "out_sharding" in attrs else "sharding"], len(shape))
    found = classify(src[0], dst[0]) if src is not None and dst is not None else None
    if found is None:
        return Counted(ctx.io, "unknown", f"{ctx.name} (shardings not classified)")
    kind, n, s_dims = found
    read, written = (_local(result.nbytes, shape, d) for d in (src[0], dst[0]))
    if kind == "free":
        return Counted(Cost(bytes_read=read, bytes_written=written), "data")
    volume, steps = ring_volume(kind, _local(result.nbytes, shape, s_dims), n)
    total = dst[1] or src[1] or n
    flops = 0
    if kind == "all_reduce" and n > 1:
        elems = result.nelems * read // max(result.nbytes, 1)
        flops = -(-(n - 1) * elems // n)
    return Counted(Cost(vector_flops=flops, bytes_read=read, bytes_written=written, comm_bytes=volume),
                   comm=(kind, n, max(total // max(n, 1), 1), steps))


def _rule(name: str):
    """Decorator: the rule of ``sdy.<name>``, given the sharding of the operand (``extra``)."""
    return SHARDY.rule(f"sdy.{name}", kind="collective", extra=operand_sharding)


@_rule("all_gather")
def all_gather(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the result per device, n the operand's shards over the result's."""
    return _shardy(ctx, lambda a, b: ("all_gather", _shards(a) // max(_shards(b), 1), b))


@_rule("reduce_scatter")
def reduce_scatter(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the operand per device, n the result's shards over the operand's."""
    return _shardy(ctx, lambda a, b: ("reduce_scatter", _shards(b) // max(_shards(a), 1), a))


@_rule("all_to_all")
def all_to_all(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the operand per device, n the axes that change dimension."""
    return _shardy(ctx, lambda a, b: ("all_to_all", _size(_moved(a, b)), a))


@_rule("collective_permute")
def collective_permute(ctx: OpContext) -> Counted:
    """S of the operand per device, over the result's shards (nothing where unchanged)."""
    return _shardy(ctx, lambda a, b: ("collective_permute", 1 if a == b else _shards(b), a))


@_rule("all_slice")
def all_slice(ctx: OpContext) -> Counted:
    """A local slice: its bytes per device, no communication."""
    return _shardy(ctx, lambda a, b: ("free", 1, a))


@_rule("all_reduce")
def all_reduce(ctx: OpContext) -> Counted:
    """2(n-1)/n x S of the operand per device, n its reduction axes."""
    def classify(a, b):
        axes = _reduction_axes(ctx)
        return None if axes is None else ("all_reduce", _size(axes), a)
    return _shardy(ctx, classify)


@_rule("reshard")
def reshard(ctx: OpContext) -> Counted:
    """Classified from the two shardings: free, an all_gather, an all_to_all or a collective_permute."""
    return _shardy(ctx, reshard_kind)


def _reduction_axes(ctx: OpContext):
    """The axes of ``reduction_axes`` (``#sdy<axis_ref_list{...}>``, which the bindings do not expose), read
    back by MLIR's parser as the one dimension of a sharding over the op's own mesh."""
    text = str(ctx.attrs["reduction_axes"])
    head = "#sdy<axis_ref_list"
    if not text.startswith(head) or not text.endswith(">"):
        return None
    t = sdy.TensorShardingAttr(ctx.attrs["out_sharding"])
    try:
        mesh = ir.FlatSymbolRefAttr(t.mesh_or_ref).value
        attr = ir.Attribute.parse(f"#sdy.sharding<@{mesh}, [{text[len(head):-1]}]>")
    except (ValueError, TypeError, ir.MLIRError):
        return None
    dims = _dims(ctx, attr, 1)
    return dims[0][0] if dims is not None else None


@SHARDY.rule("sdy.sharding_constraint", "sdy.propagation_barrier", "sdy.sharding_group", "sdy.data_flow_edge",
             kind="data")
def annotation(ctx: OpContext) -> Cost:
    """Shardings declared, nothing moved: the op's bytes."""
    return ctx.io


@SHARDY.rule("sdy.constant", kind="data", reads="none")
def constant(ctx: OpContext) -> Cost:
    """No FLOP: the bytes it writes."""
    return ctx.io


def _size(refs) -> int:
    n = 1
    for _, s in refs:
        n *= s
    return n


def _shards(dims) -> int:
    return _size([r for d in dims for r in d])


def _local(nbytes: int, shape, dims) -> int:
    """Bytes of one device's part: each dimension divided by its shards, rounded up."""
    full = local = 1
    for i, n in enumerate(shape):
        k = _size(dims[i]) if i < len(dims) else 1
        full, local = full * n, local * -(-n // k)
    return nbytes * local // full if full else nbytes


def _moved(a, b) -> list:
    where = {r: i for i, d in enumerate(a) for r in d}
    return [r for i, d in enumerate(b) for r in d if r in where and where[r] != i]


def reshard_kind(a, b):
    """(kind, n, the axes of the buffer that is S) of a reshard from per-dimension axes ``a`` to ``b``; None where
    it is none of the cases of the module docstring."""
    if a == b:
        return "free", 1, a
    old = {r for d in a for r in d}
    new = {r for d in b for r in d}
    removed, added, moved = old - new, new - old, _moved(a, b)
    kept_a = [[r for r in d if r in new] for d in a]
    kept_b = [[r for r in d if r in old] for d in b]
    if not moved and kept_a == kept_b:
        if removed:
            return "all_gather", _size(removed), kept_a  # S: the buffer after the gather, before any slice
        return "free", 1, a  # axes only added: a local slice
    if moved and not removed and not added:
        return "all_to_all", _size(moved), a
    if not removed and not added and not moved:
        return "collective_permute", _shards(b), a
    return None

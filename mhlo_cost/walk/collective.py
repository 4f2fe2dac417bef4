"""Collectives and transfers: the rules of :data:`COMM`.

Volume per device follows the ring algorithm and nccl-tests' bus-bandwidth convention, with S the size
in bytes of the full (unsharded) buffer in its own element type and n the group size:

==================== ================= =============== ============================================
op                   S is              volume          ring steps (latency term)
==================== ================= =============== ============================================
all_reduce           operand           2(n-1)/n * S    2(n-1)
all_gather           result            (n-1)/n * S     n-1
reduce_scatter       operand           (n-1)/n * S     n-1
all_to_all           operand           (n-1)/n * S     n-1
collective_permute   operand           S               1
collective_broadcast operand           S               n-1
==================== ================= =============== ============================================

Volumes are whole bytes: where S is not a multiple of n the quotient is rounded up.

Transfers: ``send`` is a point-to-point transfer of its data operands: communication of S = their bytes, as a
``collective_permute`` (S per device, one step); ``recv`` writes its bytes and has no communication of its own,
since each transfer is counted once, at its send (in an SPMD program every device runs both, as a
collective_permute's device sends and receives S and is counted S). With ``is_host_transfer`` both are host
transfers: bytes, no device-to-device communication; so are ``infeed`` (the bytes it writes) and ``outfeed``
(the bytes it reads).

The group size comes from ``replica_groups`` (a dense ``groups x size`` array), or, where the groups are
empty (one group of every participant), from the module's ``mhlo.num_partitions`` when the op has a
channel handle or global device ids and from ``mhlo.num_replicas`` otherwise. Where the op's own shapes
prove a group size (all_gather, reduce_scatter: the ratio of the gathered / scattered dimension; all_to_all:
``split_count``) and the declarations give another, the shapes win and a warning starting with
:data:`GROUP_SIZE_MISMATCH` names the op.

Each row also records the global device ids of its groups (``Row.replica_groups``; for
collective_permute its (source, target) pairs), for the network model (:mod:`mhlo_cost.network`). The
ids follow XLA's collective group modes, with R replicas, P partitions and device id = replica x P +
partition: without a channel the groups name replicas (one copy per partition); with a channel and
``use_global_device_ids`` they are device ids; with a channel on all_to_all and collective_permute they
name partitions (one copy per replica); with a channel and no global ids on the others they name
replicas, each spanning every partition.

Every rule is a pure function of its :class:`~mhlo_cost.walk.optable.OpContext`: the module's partitions,
replicas and Shardy meshes reach it as ``ctx.module`` (:func:`mhlo_cost.walk.module_facts.module_facts`, read once per module by the walk),
and what its row says beyond a cost (the comm kind, group size, groups, steps, device groups, a
:data:`GROUP_SIZE_MISMATCH` warning) travels in the :class:`~mhlo_cost.walk.costvalue.Counted` it returns.
The async start / update / done ops replay a callee's rows: that is the walk's
(:meth:`mhlo_cost.walk.base.IRVisitor.visit_async_start`).
"""
from __future__ import annotations

from jaxlib.mlir import ir

from ..ir.types import isa
from .costvalue import Cost, Counted
from .optable import OpContext, RuleTable
from .row import short_name
from .attrs import int_attr
from .bodies import body_flops
from .ring import ring_volume


#: The start of the warning for a collective whose shapes prove another group size than the module declares.
GROUP_SIZE_MISMATCH = "collective group size"


def _dim_ratio(ctx: OpContext, attr: str, gathers: bool) -> int | None:
    """result / operand (gathers) or operand / result size of the dimension ``attr`` names, where whole."""
    try:
        dim = ir.IntegerAttr(ctx.attrs[attr]).value
        a = ctx.operands[0].shape[dim]
        b = ctx.results[0].shape[dim]
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    big, small = (b, a) if gathers else (a, b)
    return big // small if small > 0 and big % small == 0 and big >= small else None


def _components(pairs: list[tuple[int, int]]) -> tuple[int, int]:
    """(largest group size, number of groups) of the devices linked by ``pairs``."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    sizes: dict[int, int] = {}
    for x in list(parent):
        r = find(x)
        sizes[r] = sizes.get(r, 0) + 1
    return (max(sizes.values()), len(sizes)) if sizes else (0, 0)


def device_groups(ids: list[list[int]], mode: str, replicas: int, partitions: int) -> tuple:
    """Global device ids of each group, for ``ids`` as written in the op (an empty list: every participant)
    under XLA's group ``mode``: ``replica``, ``partition``, ``replica_and_partition`` or ``flattened``."""
    r_all, p_all = range(max(replicas, 1)), range(max(partitions, 1))
    P = len(p_all)
    if mode == "flattened":
        return tuple(tuple(g) for g in ids) if ids else (tuple(range(len(r_all) * P)),)
    if mode == "partition":
        ids = ids or [list(p_all)]
        return tuple(tuple(r * P + p for p in g) for r in r_all for g in ids)
    if mode == "replica_and_partition":
        ids = ids or [list(r_all)]
        return tuple(tuple(r * P + p for r in g for p in p_all) for g in ids)
    ids = ids or [list(r_all)]
    return tuple(tuple(r * P + p for r in g) for p in p_all for g in ids)


def _dense_ids(attrs, name: str) -> list[list[int]]:
    """A dense 2-D integer attribute of ``attrs`` as lists of its rows (empty where absent or empty)."""
    if name not in attrs:
        return []
    attr = attrs[name]
    if not isa(attr, ir.DenseIntElementsAttr):
        return []
    shape = ir.ShapedType(ir.DenseElementsAttr(attr).type).shape
    if len(shape) != 2 or shape[0] == 0 or shape[1] == 0:
        return []
    flat = [int(x) for x in ir.DenseIntElementsAttr(attr)]
    return [flat[i:i + shape[1]] for i in range(0, len(flat), shape[1])]


# -- the rules ----------------------------------------------------------------------------------------------------
COMM = RuleTable("collective")


def _has_channel(attrs) -> bool:
    return "channel_handle" in attrs or "channel_id" in attrs


def _groups(ctx: OpContext, attr_name: str = "replica_groups") -> tuple[int, int]:
    """(group size, number of groups).

    In the StableHLO spec's cross_replica_and_partition mode (a channel, no global device ids; not
    all_to_all / collective_permute) each group of replicas spans every partition: its size is the
    group's length x the number of partitions (empty groups: every replica)."""
    attrs = ctx.attrs
    has_channel = _has_channel(attrs)
    global_ids = "use_global_device_ids" in attrs
    partitions, replicas = ctx.module.num_partitions, ctx.module.num_replicas
    across = has_channel and not global_ids and short_name(ctx.name) not in ("all_to_all", "collective_permute")
    if attr_name in attrs:
        attr = attrs[attr_name]
        if isa(attr, ir.DenseIntElementsAttr):
            shape = ir.ShapedType(ir.DenseElementsAttr(attr).type).shape
            if len(shape) == 2 and shape[0] > 0 and shape[1] > 0:
                return (shape[1] * partitions if across else shape[1]), shape[0]
    if global_ids:
        return partitions * replicas, 1
    if across:
        return replicas * partitions, 1
    if has_channel and partitions > 1:
        return partitions, replicas
    return replicas, partitions


def _device_groups(ctx: OpContext, ids: list[list[int]]) -> tuple:
    if not _has_channel(ctx.attrs):
        mode = "replica"
    elif "use_global_device_ids" in ctx.attrs:
        mode = "flattened"
    elif short_name(ctx.name) in ("all_to_all", "collective_permute"):
        mode = "partition"
    else:
        mode = "replica_and_partition"
    return device_groups(ids, mode, ctx.module.num_replicas, ctx.module.num_partitions)


def _collective(ctx: OpContext, kind: str, n: int, groups: int, full: str = "operands", reduces: bool = False,
                warning: tuple = ()) -> Counted:
    """The count of one collective; S is the operands' or the results' bytes, as ``full`` says."""
    if kind == "collective_permute":
        pairs = [p for p in _dense_ids(ctx.attrs, "source_target_pairs") if p[0] != p[1]]
        device_ids = _device_groups(ctx, pairs) if pairs else ()
    else:
        device_ids = _device_groups(ctx, _dense_ids(ctx.attrs, "replica_groups"))
    full_bytes = ctx.bytes_read if full == "operands" else ctx.bytes_written
    volume, steps = ring_volume(kind, full_bytes, n)
    flops = 0
    if reduces and n > 1:
        # Each device combines (n-1)/n of the buffer (the ring's reduce-scatter phase).
        f = ctx.bodies[0][0] if ctx.bodies else 1
        elems = sum(t.nelems for t in ctx.operands)
        flops = -(-(n - 1) * elems // n) * f
    return Counted(ctx.io + Cost(vector_flops=flops, comm_bytes=volume), comm=(kind, n, groups, steps),
                   groups=device_ids, warning=warning)


def _proven(n: int, proven: int | None) -> tuple[int, tuple]:
    """The group size the op's shapes prove, where they prove one, and a :data:`GROUP_SIZE_MISMATCH` warning
    where the module's declarations (replica groups, partitions, replicas) give another."""
    if proven is None or proven == n:
        return n, ()
    return proven, (GROUP_SIZE_MISMATCH, f"the module's declarations give {n} participants, its shapes prove "
                                         f"{proven}; counted with {proven}")


def _reducer(region: ir.Region, functions) -> tuple[int, int]:
    """(FLOPs, transcendentals) of one application of a reducing collective's body."""
    return body_flops(region)


@COMM.rule("all_reduce", "cross_replica_sum", kind="collective", body=_reducer)
def all_reduce(ctx: OpContext) -> Counted:
    """2(n-1)/n x S of the operands per device, in 2(n-1) ring steps; the reducer's FLOPs on the combines."""
    n, groups = _groups(ctx)
    return _collective(ctx, "all_reduce", n, groups, reduces=True)


@COMM.rule("all_gather", kind="collective")
def all_gather(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the results per device, n from the groups (or the gathered dimension's ratio)."""
    n, groups = _groups(ctx)
    n, warning = _proven(n, _dim_ratio(ctx, "all_gather_dim", gathers=True))
    return _collective(ctx, "all_gather", n, groups, full="results", warning=warning)


@COMM.rule("reduce_scatter", kind="collective", body=_reducer)
def reduce_scatter(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the operands per device, n from the groups (or the scattered dimension's ratio)."""
    n, groups = _groups(ctx)
    n, warning = _proven(n, _dim_ratio(ctx, "scatter_dimension", gathers=False))
    return _collective(ctx, "reduce_scatter", n, groups, reduces=True, warning=warning)


@COMM.rule("all_to_all", kind="collective")
def all_to_all(ctx: OpContext) -> Counted:
    """(n-1)/n x S of the operands per device, n from the groups (or ``split_count``)."""
    n, groups = _groups(ctx)
    split = int_attr(ctx.attrs, "split_count", 0)
    n, warning = _proven(n, split if split > 0 else None)
    return _collective(ctx, "all_to_all", n, groups, warning=warning)


@COMM.rule("collective_permute", kind="collective")
def collective_permute(ctx: OpContext) -> Counted:
    """S of the operands per device, one step, within the groups its source -> target pairs connect."""
    # Groups are the connected sets of the source->target pairs (a ring over 4 devices: one group of
    # 4; swaps between 0<->4, 1<->5, ...: four groups of 2).
    pairs = []
    if "source_target_pairs" in ctx.attrs:
        attr = ctx.attrs["source_target_pairs"]
        if isa(attr, ir.DenseIntElementsAttr):
            flat = [int(x) for x in ir.DenseIntElementsAttr(attr)]
            pairs = [(a, b) for a, b in zip(flat[0::2], flat[1::2]) if a != b]  # a self-pair moves nothing
    if not pairs:
        return _collective(ctx, "collective_permute", 1, 0)  # ring_volume: n = 1 moves no bytes
    size, groups = _components(pairs)
    return _collective(ctx, "collective_permute", size, groups)


@COMM.rule("collective_broadcast", kind="collective")
def collective_broadcast(ctx: OpContext) -> Counted:
    """S of the operands per device, in n-1 steps."""
    n, groups = _groups(ctx)
    return _collective(ctx, "collective_broadcast", n, groups)



# -- transfers ----------------------------------------------------------------------------------------------------
@COMM.rule("infeed", "outfeed", "recv", kind="data")
def transfer(ctx: OpContext) -> Cost:
    """Data to or from the host, or a receive (counted at its send): the op's bytes, no communication."""
    return ctx.io


@COMM.rule("send", kind="collective")
def send(ctx: OpContext) -> Counted:
    """A point-to-point transfer of S = its operands' bytes, as a collective_permute; to the host: bytes only."""
    if "is_host_transfer" in ctx.attrs and ir.BoolAttr(ctx.attrs["is_host_transfer"]).value:
        return Counted(ctx.io, "data")
    return Counted(ctx.io + Cost(comm_bytes=ctx.bytes_read), comm=("collective_permute", 2, 1, 1))

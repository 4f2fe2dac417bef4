"""Collectives: ``CommIRVisitor``.

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
"""
from __future__ import annotations

from jaxlib.mlir import ir

from ..types import isa
from .costvalue import Cost
from .row import short_name
from .ruleset import RuleSet
from .tflops import int_attr
from .vector import body_flops


#: The start of the warning for a collective whose shapes prove another group size than the module declares.
GROUP_SIZE_MISMATCH = "collective group size"


def _dim_ratio(op: ir.Operation, attr: str, gathers: bool) -> int | None:
    """result / operand (gathers) or operand / result size of the dimension ``attr`` names, where whole."""
    try:
        dim = ir.IntegerAttr(op.attributes[attr]).value
        a = ir.ShapedType(op.operands[0].type).shape[dim]
        b = ir.ShapedType(op.results[0].type).shape[dim]
    except (KeyError, ValueError, TypeError, IndexError):
        return None
    big, small = (b, a) if gathers else (a, b)
    return big // small if small > 0 and big % small == 0 and big >= small else None


def ring_volume(kind: str, full_bytes: int, n: int) -> tuple[int, int]:
    """(bytes per device, ring steps) of one collective over a group of n devices."""
    if n <= 1:
        return 0, 0
    if kind == "all_reduce":
        return -(-2 * (n - 1) * full_bytes // n), 2 * (n - 1)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return -(-(n - 1) * full_bytes // n), n - 1
    if kind == "collective_permute":
        return full_bytes, 1
    if kind == "collective_broadcast":
        return full_bytes, n - 1
    raise ValueError(f"no ring volume rule for {kind}")


def _module_int(module: ir.Module, name: str, default: int = 1) -> int:
    attrs = module.operation.attributes
    if name in attrs:
        try:
            return ir.IntegerAttr(attrs[name]).value
        except (ValueError, TypeError):
            return default
    return default


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


def _dense_ids(op: ir.Operation, name: str) -> list[list[int]]:
    """A dense 2-D integer attribute as lists of its rows (empty where absent or empty)."""
    if name not in op.attributes:
        return []
    attr = op.attributes[name]
    if not isa(attr, ir.DenseIntElementsAttr):
        return []
    shape = ir.ShapedType(ir.DenseElementsAttr(attr).type).shape
    if len(shape) != 2 or shape[0] == 0 or shape[1] == 0:
        return []
    flat = [int(x) for x in ir.DenseIntElementsAttr(attr)]
    return [flat[i:i + shape[1]] for i in range(0, len(flat), shape[1])]


class CommIRVisitor(RuleSet):
    """Counts every collective's per-device volume; one row each, kind ``collective``."""

    metric = "communication"

    def _groups(self, op: ir.Operation, attr_name: str = "replica_groups") -> tuple[int, int]:
        """(group size, number of groups).

        In the StableHLO spec's cross_replica_and_partition mode (a channel, no global device ids; not
        all_to_all / collective_permute) each group of replicas spans every partition: its size is the
        group's length x the number of partitions (empty groups: every replica)."""
        has_channel = "channel_handle" in op.attributes or "channel_id" in op.attributes
        global_ids = "use_global_device_ids" in op.attributes
        partitions = _module_int(self.module, "mhlo.num_partitions")
        replicas = _module_int(self.module, "mhlo.num_replicas")
        across = has_channel and not global_ids and short_name(op.name) not in ("all_to_all", "collective_permute")
        if attr_name in op.attributes:
            attr = op.attributes[attr_name]
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

    def _device_groups(self, op: ir.Operation, ids: list[list[int]]) -> tuple:
        channel = "channel_handle" in op.attributes or "channel_id" in op.attributes
        if not channel:
            mode = "replica"
        elif "use_global_device_ids" in op.attributes:
            mode = "flattened"
        elif short_name(op.name) in ("all_to_all", "collective_permute"):
            mode = "partition"
        else:
            mode = "replica_and_partition"
        return device_groups(ids, mode, _module_int(self.module, "mhlo.num_replicas"),
                             _module_int(self.module, "mhlo.num_partitions"))

    def _collective(self, op: ir.Operation, kind: str, n: int, groups: int, full: str = "operands",
                    reduces: bool = False) -> None:
        """A row for one collective; S is the operands' or the results' bytes, as ``full`` says."""
        row = self.emit(op, "collective")
        if kind == "collective_permute":
            pairs = [p for p in _dense_ids(op, "source_target_pairs") if p[0] != p[1]]
            row.replica_groups = self._device_groups(op, pairs) if pairs else ()
        else:
            row.replica_groups = self._device_groups(op, _dense_ids(op, "replica_groups"))
        full_bytes = row.bytes_read if full == "operands" else row.bytes_written
        volume, row.comm_steps = ring_volume(kind, full_bytes, n)
        row.comm_kind, row.group_size, row.num_groups = kind, n, groups
        flops = 0
        if reduces and n > 1:
            # Each device combines (n-1)/n of the buffer (the ring's reduce-scatter phase).
            f, _ = body_flops(op.regions[0]) if len(op.regions) else (1, 0)
            elems = sum(t.nelems for t in row.operands)
            flops = -(-(n - 1) * elems // n) * f
        row.cost += Cost(vector_flops=flops, comm_bytes=volume)

    def visit_all_reduce(self, op: ir.Operation) -> None:
        n, groups = self._groups(op)
        self._collective(op, "all_reduce", n, groups, reduces=True)

    visit_cross_replica_sum = visit_all_reduce

    def visit_all_gather(self, op: ir.Operation) -> None:
        n, groups = self._groups(op)
        n = self._proven(op, n, _dim_ratio(op, "all_gather_dim", gathers=True))
        self._collective(op, "all_gather", n, groups, full="results")

    def visit_reduce_scatter(self, op: ir.Operation) -> None:
        n, groups = self._groups(op)
        n = self._proven(op, n, _dim_ratio(op, "scatter_dimension", gathers=False))
        self._collective(op, "reduce_scatter", n, groups, reduces=True)

    def visit_all_to_all(self, op: ir.Operation) -> None:
        n, groups = self._groups(op)
        split = int_attr(op.attributes, "split_count", 0)
        self._collective(op, "all_to_all", self._proven(op, n, split if split > 0 else None), groups)

    def _proven(self, op: ir.Operation, n: int, proven: int | None) -> int:
        """The group size the op's shapes prove, where they prove one; a :data:`GROUP_SIZE_MISMATCH` warning
        where the module's declarations (replica groups, partitions, replicas) give another."""
        if proven is None or proven == n:
            return n
        self.warnings.append(f"{GROUP_SIZE_MISMATCH}: {op.name} at {self.loc(op).describe()}: the module's "
                             f"declarations give {n} participants, its shapes prove {proven}; counted with {proven}")
        return proven

    def visit_collective_permute(self, op: ir.Operation) -> None:
        # Groups are the connected sets of the source->target pairs (a ring over 4 devices: one group of
        # 4; swaps between 0<->4, 1<->5, ...: four groups of 2).
        pairs = []
        if "source_target_pairs" in op.attributes:
            attr = op.attributes["source_target_pairs"]
            if isa(attr, ir.DenseIntElementsAttr):
                flat = [int(x) for x in ir.DenseIntElementsAttr(attr)]
                pairs = [(a, b) for a, b in zip(flat[0::2], flat[1::2]) if a != b]  # a self-pair moves nothing
        size, groups = _components(pairs)
        if not pairs:
            self._collective(op, "collective_permute", 1, 0)  # ring_volume: n = 1 moves no bytes
            return
        self._collective(op, "collective_permute", size, groups)

    def visit_collective_broadcast(self, op: ir.Operation) -> None:
        n, groups = self._groups(op)
        self._collective(op, "collective_broadcast", n, groups)

    # Async pairs: the start op names the computation (a function) that holds the collective.
    def visit_async_start(self, op: ir.Operation) -> None:
        if "called_computation" in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes["called_computation"]).value
            self.replay(self.walk.function_rows(callee), 1, self.loc(op).scope)
        else:
            self.walk.generic_visit(op)

    def visit_async_update(self, op: ir.Operation) -> None:
        pass

    def visit_async_done(self, op: ir.Operation) -> None:
        pass

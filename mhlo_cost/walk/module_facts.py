"""What the rules read of the module itself, read once per walk (:class:`~.optable.ModuleFacts`, which a rule
finds as ``ctx.module``): the partitions and replicas it declares (``mhlo.num_partitions``,
``mhlo.num_replicas``) and its Shardy meshes by name."""
from __future__ import annotations

from types import MappingProxyType

from jaxlib.mlir import ir

from ..ir.bindings import sdy
from .optable import ModuleFacts


def module_int(module: ir.Module, name: str, default: int = 1) -> int:
    """The integer attribute ``name`` of the module, ``default`` where it has none (or one that is no integer)."""
    attrs = module.operation.attributes
    if name in attrs:
        try:
            return ir.IntegerAttr(attrs[name]).value
        except (ValueError, TypeError):
            return default
    return default


def mesh_axes(mesh) -> MappingProxyType:
    """{axis name: size} of a Shardy mesh attribute (``sdy.MeshAttr``), read-only."""
    return MappingProxyType({sdy.MeshAxisAttr(a).name: sdy.MeshAxisAttr(a).size for a in mesh.axes})


def module_facts(module: ir.Module) -> ModuleFacts:
    """What the rules read of ``module``: ``mhlo.num_partitions``, ``mhlo.num_replicas`` and its ``sdy.mesh``
    declarations by name."""
    meshes = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "sdy.mesh":
            meshes[ir.StringAttr(op.attributes["sym_name"]).value] = mesh_axes(sdy.MeshAttr(op.attributes["mesh"]))
    return ModuleFacts(module_int(module, "mhlo.num_partitions"), module_int(module, "mhlo.num_replicas"),
                       MappingProxyType(meshes))

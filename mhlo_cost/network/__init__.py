"""Communication on real machines: link tiers, collective algorithms, and how much of it hides.

* :mod:`.topology`: where devices sit (nodes on a network, or a mesh / torus) and the links' figures;
* :mod:`.nodes`, :mod:`.mesh`: the algorithms of a collective on each (ring over channels, tree,
  hierarchical, per-axis rings, direct), each timed as latency terms plus the busiest link's bytes over
  its bandwidth; the fastest is taken (:func:`estimate`);
* :mod:`.systems`: system profiles (``data/systems.toml``): a chip and its topology, resolved by
  ``--hardware`` like a chip (:func:`resolve_profile`);
* :mod:`.schedule`: exposed communication from the data flow (:func:`exposed_comm`).
"""
from .collective import estimate, full_bytes, row_estimate, row_groups
from .schedule import Exposure, exposed_comm
from .systems import SystemProfile, list_systems, load_systems, resolve_profile, system_names
from .topology import CollectiveEstimate, Link, MeshTopology, NetworkError, NodeTopology

__all__ = [
    "CollectiveEstimate", "Exposure", "Link", "MeshTopology", "NetworkError", "NodeTopology", "SystemProfile",
    "estimate", "exposed_comm", "full_bytes", "list_systems", "load_systems", "resolve_profile", "row_estimate",
    "row_groups", "system_names",
]

"""``mhlo-cost hardware``: the shipped hardware profiles: chips, then systems."""
from __future__ import annotations

import sys

from .common import EXIT_OK

def cmd_hardware(args) -> int:
    from ..hardware import list_profiles

    import pandas as pd
    from ..report import render

    profiles = list_profiles()
    df = pd.DataFrame({
        "name": [p.name for p in profiles],
        "bf16_tflops": [p.matrix_peak("bf16") / 1e12 for p in profiles],
        "hbm_gb_s": [p.hbm_bandwidth / 1e9 for p in profiles],
        "link_gb_s": [p.link_bandwidth / 1e9 for p in profiles],
        "description": [p.description for p in profiles],
    })
    sys.stdout.write(render(df, "table", "raw"))
    sys.stdout.write("\nsystems (a chip and the network between many: --hardware NAME as for a chip)\n")
    sys.stdout.write(render(_systems_frame(), "table", "raw"))
    return EXIT_OK


def _systems_frame():
    import pandas as pd

    from ..network import MeshTopology, list_systems

    rows = []
    for s in list_systems():
        t = s.topology
        if isinstance(t, MeshTopology):
            layout = " x ".join(map(str, t.dims)) + (" torus" if all(t.wraparound) else " mesh")
            links = f"{t.link.name} {t.link.bandwidth / 1e9:g} GB/s per link"
        else:
            layout = f"{t.devices_per_node} per node"
            links = f"{t.intra.name} {t.intra.bandwidth / 1e9:g} GB/s" + (
                f", {t.nics_per_node} x {t.inter.bandwidth * 8 / 1e9:g} Gb/s {t.inter.name}" if t.inter else "")
        rows.append((s.name, s.chip, layout, links, s.description))
    return pd.DataFrame(rows, columns=["name", "chip", "devices", "links", "description"])



def register(sub) -> None:
    p = sub.add_parser("hardware", help="list the shipped hardware profiles (chips and systems)")
    p.set_defaults(func=cmd_hardware)

"""``mhlo-cost hardware``: the hardware profiles (shipped, and a user's file first): chips, then systems."""
from __future__ import annotations

import sys

from .common import EXIT_OK


def _chips(path):
    """The chips of the user's file ``path`` (first) and the shipped ones, each name once."""
    from ..machines.hardware import list_profiles
    from ..network.systems import file_profiles

    chips, systems = file_profiles(path) if path else ({}, {})
    seen = set(chips)
    return list(chips.values()) + [p for p in list_profiles() if p.name not in seen], systems


def cmd_hardware(args, console) -> int:
    import pandas as pd

    from ..network import list_systems
    from ..views.render import render_frame as render

    chips, own_systems = _chips(args.hardware_file)
    df = pd.DataFrame({
        "name": [p.name for p in chips],
        "aliases": [", ".join(p.aliases) for p in chips],
        "bf16_tflops": [p.matrix_peak("bf16") / 1e12 for p in chips],
        "hbm_gb_s": [p.hbm_bandwidth / 1e9 for p in chips],
        "link_gb_s": [p.link_bandwidth / 1e9 for p in chips],
        "description": [p.description for p in chips],
    })
    sys.stdout.write("chips (--hardware NAME or an alias)\n")
    sys.stdout.write(render(df, "table", "raw", wide=True))
    sys.stdout.write("\nsystems (a chip and the network between many: --hardware NAME as for a chip)\n")
    seen = set(own_systems)
    systems = list(own_systems.values()) + [s for s in list_systems() if s.name not in seen]
    sys.stdout.write(render(_systems_frame(systems), "table", "raw", wide=True))
    return EXIT_OK


def _systems_frame(systems):
    import pandas as pd

    from ..network import MeshTopology

    rows = []
    for s in systems:
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
    p = sub.add_parser("hardware", help="list the hardware profiles (chips and systems)",
                       description="List the shipped hardware profiles, chips (with their aliases) then systems; "
                                   "with --hardware-file, that file's profiles first.")
    p.add_argument("--hardware-file", metavar="FILE",
                   help="a TOML file of your own profiles (mhlo_cost/machines/data/hardware_template.toml), listed first")
    p.set_defaults(func=cmd_hardware)

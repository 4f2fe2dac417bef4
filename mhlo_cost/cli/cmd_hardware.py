"""``mhlo-cost hardware [list|show NAME|diff A B]``: the hardware profiles (shipped, and a user's file first):
the list of chips then systems; one profile's every figure with its unit and source; two side by side."""
from __future__ import annotations

import sys

from .common import EXIT_OK, UserError


def _chips(path):
    """The chips of the user's file ``path`` (first) and the shipped ones, each name once."""
    from ..machines.hardware import list_profiles
    from ..network.systems import file_profiles

    chips, systems = file_profiles(path) if path else ({}, {})
    seen = set(chips)
    return list(chips.values()) + [p for p in list_profiles() if p.name not in seen], systems


def cmd_hardware(args, console) -> int:
    want = {"list": 0, "show": 1, "diff": 2}[args.action]
    if len(args.names) != want:
        raise UserError(f"hardware {args.action} takes {('no', 'one', 'two')[want]} name{'s' * (want != 1)}, got "
                        f"{len(args.names)}" + (f" ({' '.join(args.names)})" if args.names else ""))
    if args.action != "list":
        from ..views.hardware_sheet import diff, show

        profiles = [_resolve(n, args.hardware_file) for n in args.names]
        sys.stdout.write(show(profiles[0], args.format) if want == 1 else diff(*profiles, fmt=args.format))
        return EXIT_OK
    return _list(args)


def _resolve(name: str, path):
    """The chip or system ``name``; an unknown name is one line naming the close ones."""
    from ..machines.hardware import HardwareError
    from ..network.systems import resolve_profile

    try:
        return resolve_profile(name, path)
    except HardwareError as e:
        if not str(e).startswith("unknown hardware"):
            raise UserError(str(e)) from None
    from ..views.hardware_sheet import close_names

    close = close_names(name, path)
    raise UserError(f"unknown hardware {name!r} (" + (f"close: {', '.join(close)}" if close else "no close name")
                    + "; `mhlo-cost hardware` lists them all)")


def _list(args) -> int:
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
    p = sub.add_parser("hardware", help="the hardware profiles (chips and systems): list, show one, diff two",
                       description="list (the default): the shipped hardware profiles, chips (with their aliases) then "
                                   "systems; with --hardware-file, that file's profiles first. show NAME: every figure "
                                   "of a chip or system with its unit and its source (or ESTIMATE and why). diff A B: "
                                   "the figures of two side by side, with the ratio B/A.")
    p.add_argument("action", nargs="?", choices=("list", "show", "diff"), default="list",
                   help="list (default), show NAME, diff A B")
    p.add_argument("names", nargs="*", metavar="NAME", help="chip or system names or aliases (show: one; diff: two)")
    p.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table",
                   help="show and diff: the output format (default: table)")
    p.add_argument("--hardware-file", metavar="FILE",
                   help="a TOML file of your own profiles (mhlo_cost/machines/data/hardware_template.toml), listed first")
    p.set_defaults(func=cmd_hardware)

"""``mhlo-cost calibrate``: measure the local default device and write a hardware profile."""
from __future__ import annotations

import sys

from .common import EXIT_OK, Progress, UserError, add_force, add_progress, claim_output, say
from ..files.written import record_output


def cmd_calibrate(args) -> int:
    from ..machines.hardware import load_profiles
    from ..roofline.calibrate import calibrate, profile_toml, step_count

    claim_output(args)
    bar, total, done = Progress.of(args), step_count(args.quick), [0]

    def progress(msg: str) -> None:
        bar.count(done[0], total, "calibrate", msg)
        done[0] += 1

    cal = calibrate(quick=args.quick, progress=progress)
    bar.done()
    text = profile_toml(cal, args.name)
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return EXIT_OK
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UserError(f"cannot write {args.output}: {e.strerror}") from None
    load_profiles(args.output)  # what we wrote must load
    record_output(args.output)
    say(args, f"wrote {args.output}: --hardware-file {args.output} --hardware {args.name}", note=True)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's default JAX device and write a hardware profile",
                       description="Microbenchmarks through JAX on the default device (matmul per dtype over sizes, "
                                   "stream bandwidth, vector and transcendental rates, small-kernel cost), written "
                                   "as a TOML profile for --hardware-file. Under two minutes on a CPU.")
    p.add_argument("-o", "--output", metavar="FILE", help="write the profile here (default: stdout)")
    p.add_argument("--name", default="calibrated", type=_name, help="the profile's name (default: calibrated)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, a few seconds (a smoke test, not a calibration)")
    add_force(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_progress(p)
    p.set_defaults(func=cmd_calibrate)


def _name(value: str) -> str:
    import re

    if not re.match(r"^[a-z0-9][a-z0-9._-]*$", value):
        raise UserError(f"--name must be lower-case letters, digits, '.', '_' or '-', got {value!r}")
    return value

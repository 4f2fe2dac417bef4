"""``mhlo-cost calibrate``: measure the local default device and write a hardware profile."""
from __future__ import annotations

from .common import EXIT_OK, UserError, add_force, add_progress, add_quiet, claim_output, write_output


def cmd_calibrate(args, console) -> int:
    from ..machines.hardware import HardwareError, parse_profiles
    from ..roofline.calibrate import calibrate, profile_toml, step_count

    claim_output(args, console)
    bar, total, done = console.progress(), step_count(args.quick), [0]

    def progress(msg: str) -> None:
        bar.count(done[0], total, "calibrate", msg)
        done[0] += 1

    cal = calibrate(quick=args.quick, progress=progress)
    bar.done()
    text = profile_toml(cal, args.name)
    try:
        parse_profiles(text)  # what is written must load
    except HardwareError as e:
        raise UserError(f"the measured profile does not load: {e}") from None
    write_output(text, args.output)
    if args.output not in (None, "-"):
        console.say(f"wrote {args.output}: --hardware-file {args.output} --hardware {args.name}", note=True)
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
    add_quiet(p)
    add_progress(p)
    p.set_defaults(func=cmd_calibrate)


def _name(value: str) -> str:
    import re

    if not re.match(r"^[a-z0-9][a-z0-9._-]*$", value):
        raise UserError(f"--name must be lower-case letters, digits, '.', '_' or '-', got {value!r}")
    return value

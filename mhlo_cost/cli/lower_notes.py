"""The notes ``mhlo-cost lower`` prints on stderr after a lowering: what was written and how long it took, a
mixture of experts' routing and loads, the all_to_all bytes of ``--expert-parallel N``, the dtype lowered in."""
from __future__ import annotations

from .common import UserError


def expert_parallel_line(args, info: dict) -> str:
    """``--expert-parallel N``: the all_to_all dispatch and combine bytes per device of the lowered expert
    layers split over N devices (:mod:`mhlo_cost.network.expert_parallel`)."""
    n = args.expert_parallel
    if n is None:
        return ""
    moe = info.get("moe")
    if moe is None:
        raise UserError("--expert-parallel applies to mixture-of-experts models: this one has no expert layer")
    bad = sorted({e for e in moe["experts"] if e % n})
    if bad:
        raise UserError(f"--expert-parallel {n} does not divide the {bad[0]} experts of a layer")
    from ..network.expert_parallel import expert_parallel

    comms = [expert_parallel(sum(rows), h, b, n) for rows, h, b in zip(moe["rows"], moe["hidden"], moe["dtype_bytes"])]
    each = sorted({c.bytes_per_device for c in comms})
    total = sum(c.total_bytes_per_device for c in comms)
    return (f"expert parallelism over {n} devices: a dispatch and a combine all_to_all per expert layer, "
            f"{' / '.join(f'{b:,}' for b in each)} bytes sent per device each, {total:,} bytes per device "
            f"over the forward")


def moe_line(console, info: dict) -> None:
    """A mixture of experts' routing assumption and expert loads, as lowered (a note; none without experts), or a
    warning naming expert layers that ran as the library wrote them."""
    moe = info.get("moe")
    if moe is not None:
        console.say(f"mixture of experts, routing {moe['routing']} ({moe['assumption']}), {moe['layers']} expert "
                    f"layers: {moe['text']}", note=True)
    if info.get("unrouted"):
        console.say(f"warning: {len(info['unrouted'])} expert layers not routed with static shapes, counted as the "
                    f"library computes them (no routing assumption): {', '.join(info['unrouted'])}")


def lowered_lines(console, args, res, info: dict, ep_line: str) -> None:
    """What was written and how long it took; the mixture of experts, expert parallelism and the dtype lowered
    in where they apply (notes on stderr)."""
    where = f" written to {args.output}" if args.output else ""
    console.say(f"{res.format} {res.nbytes / 1e6:.2f} MB{where} in {res.seconds:.2f} s, peak RSS "
                f"{res.peak_rss_mb:.0f} MiB", note=True)
    moe_line(console, info)
    if ep_line:
        console.say(ep_line, note=True)
    if "dtype" in info:
        console.say(f"lowered in {info['dtype']}", note=True)

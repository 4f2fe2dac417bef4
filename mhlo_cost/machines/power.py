"""The board power of tensor-core work against its SM clock, and the clock a whole step holds under the power limit.

Two questions, one curve. (a) At what clock does a stream of products hold a lower power limit (the 500 W H100 of
torchtitan's benchmarks) than the one its clock was measured at (700 W)? (b) At what clock do a training step's
products run when the step also has memory-bound kernels, launch gaps and communication waits that draw less?

**The curve.** Ujeniya, Eitzinger, Hager, Wellein, "Architectural Trade-offs in the Energy-Efficient Era: a
comparative study of power-capping NVIDIA H100 and H200" (arXiv 2604.11391v2, 2026) cap an H100 (the 94 GiB
HBM2e SXM board, the one torchtitan's 500 W rows ran on) from 200 to 700 W and print, for a compute-bound ViT-L/16
inference at batch 256 (TF32), the average SM clock per cap (Fig. 6b) and the board's average power, memory plus
GPU (Fig. 9b). The paper's text is not stored here; the figures' printed annotations are read as transcribed from
its PDF text layer in a public power-flexibility model (``h100_vit_l16_inference_ujeniya2026``): 625 MHz at 199 W,
1132 at 298, 1501 at 395, 1731 at 493, 1889 at 591, 1969 MHz at 647 W (the 700 W cap does not bind: 1969 MHz is the
H100's maximum clock, 1980). Its DGEMM and Schoenauer-triad figures are not among the numbers that could be read.
This is the measured shape of board power against SM clock for one chip running one compute-bound kernel mix on the
DVFS curve: :data:`CURVE`, interpolated linearly between the points.

**A product stream on it.** A bf16 random-data stream switches more than the ViT's TF32 mix (the H200 stream draws
its 700 W at 1447 MHz, where the ViT draws 381 W; the same stream on zeros draws 403 W at 1725 MHz:
``benchmarks/data/measured_h200_train_run3.jsonl``). Dynamic power is alpha C V(f)^2 f, so a kernel of another
switching activity alpha scales the part of the curve above its zero-clock floor, not the floor (leakage, memory
and board idle): P(f) = P0 + a (CURVE(f) - P0), P0 = the curve's own floor extrapolated to zero clock along its
first segment (77 W), ``a`` set by the profile's one measured point (the stream's clock ``f_s`` at its
``power_limit_w``). So (a): the clock at which the same stream draws a lower limit (:func:`stream_clock`); it
replaces the cube law (f ~ P^(1/3)), which takes the whole power as dynamic and the DVFS curve as V ~ f everywhere;
the measured curve is flatter than f^3 below 1500 MHz (V at its floor, P ~ f) and steeper above.
The ViT is TF32 and the stream bf16: the ratio carries over as far as both kernels sit on the same V(f) curve of
the same die and differ by their switching activity alone (alpha scales the dynamic part at every clock).

**A step on it** (:func:`step_clock`). The power limit binds on the board's power averaged over a window far longer
than one kernel (NVML's ``nvmlDeviceGetPowerUsage``: power averaged over a one-second interval on Ampere and newer;
the power manager acts on that reading, ``clocks_event_reasons.sw_power_cap``), so within a step the clock is the
one at which the step's average power equals the limit: its products' time t_d(f) = t_d(peak) x peak / f at P(f),
its memory-bound kernels' time t_m at ``memory_w``, its waits and gaps t_i at ``idle_w``:
t_d(f) (P(f) - L) + t_m (P_m - L) + t_i (P_i - L) = 0, solved by bisection between the stream's clock (a step of
products alone) and ``peak_mhz`` (the clock the matrix peak is stated at: a step that cannot reach the limit).
Every kernel runs at the one clock (the power manager sets one SM clock for the chip), so tensor-core work of another
activity (the fused attention: its tensor cores issue about 0.4 of a GEMM stream's rate,
:func:`mhlo_cost.roofline.attention_compute.sm_clock`) is another term of the same sum, its time t_a(f) stretched
like the products' and its power the floor plus its activity's share of the stream's part above it,
P_a(f) = P0 + r (P(f) - P0) (r: its activity over the stream's; ``others`` of :func:`step_clock`).
``memory_w`` and ``idle_w``: Ma, Afzal, Eitzinger, Wellein, "The Illusion of Power Capping in LLM Decode"
(arXiv 2605.11999, 2026): on an H200 at its 700 W limit, memory-bound decode (HBM saturated) draws 137-300 W; the
top of that range is taken as a memory-bound kernel's power and the bottom as a GPU whose kernels barely load it
(communication waits, launch gaps). No training row of ``benchmarks/data`` set any number here.
"""
from __future__ import annotations

#: (SM MHz, board W) of a compute-bound kernel mix on an H100 under power caps of 200-700 W: Ujeniya et al. 2026
#: Fig. 6b (clock) and Fig. 9b (memory + GPU power), ViT-L/16 inference, batch 256, TF32 (see the module's text).
CURVE = ((625.0, 199.0), (1132.0, 298.0), (1501.0, 395.0), (1731.0, 493.0), (1889.0, 591.0), (1969.0, 647.0))


def curve_w(mhz: float) -> float:
    """:data:`CURVE`'s board power at ``mhz``, linear between its points and along its end segments beyond them."""
    pts = CURVE
    i = 1
    while i < len(pts) - 1 and mhz > pts[i][0]:
        i += 1
    (f0, p0), (f1, p1) = pts[i - 1], pts[i]
    return p0 + (p1 - p0) * (mhz - f0) / (f1 - f0)


def floor_w() -> float:
    """The curve's power extrapolated to zero clock along its first segment: what does not scale with switching."""
    return curve_w(0.0)


def stream_w(mhz: float, at_mhz: float, at_w: float) -> float:
    """Board power of a product stream at ``mhz`` that draws ``at_w`` at ``at_mhz``: the curve's part above its
    floor scaled by the stream's switching activity."""
    p0 = floor_w()
    return p0 + (at_w - p0) * (curve_w(mhz) - p0) / (curve_w(at_mhz) - p0)


def activity_clock(stream_mhz: float, ratio: float) -> float:
    """The clock at which a kernel switching ``ratio`` times as much as a product stream draws what the stream
    draws at ``stream_mhz`` (the stream at its limit: the kernel's clock under the same limit). Both are the floor
    plus their activity times the curve's part above it, so the kernel's curve power is the floor plus the stream's
    part over ``ratio``; beyond the curve's last point along its last segment (the caller caps it at the peak)."""
    p0 = floor_w()
    target = p0 + (curve_w(stream_mhz) - p0) / ratio
    hi = max(stream_mhz, 1.0)
    while curve_w(hi) < target:
        hi *= 2
    return _bisect(lambda f: curve_w(f) - target, 0.0, hi)


def _bisect(g, lo: float, hi: float) -> float:
    """The root of the increasing ``g`` in [lo, hi] (g(lo) <= 0 <= g(hi)), to well under a MHz."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if g(mid) > 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def stream_clock(limit_w: float, at_mhz: float, at_w: float) -> float:
    """The clock at which the stream that draws ``at_w`` at ``at_mhz`` draws ``limit_w`` (ValueError where the
    curve never gets there: at or below its floor)."""
    for w in (limit_w, at_w):
        if w <= floor_w():
            raise ValueError(f"a power of {w:g} W is at or below the curve's floor ({floor_w():.0f} W)")
    hi = at_mhz
    while stream_w(hi, at_mhz, at_w) < limit_w:
        hi *= 2
    return _bisect(lambda f: stream_w(f, at_mhz, at_w) - limit_w, 0.0, hi)


def step_clock(dots_s: float, memory_s: float, idle_s: float, *, peak_mhz: float, stream_mhz: float,
               limit_w: float, memory_w: float, idle_w: float, others: tuple = ()) -> float:
    """The SM clock of a step whose products take ``dots_s`` at ``peak_mhz`` (and peak / f times that at f), whose
    memory-bound kernels take ``memory_s`` at ``memory_w`` and whose waits and gaps take ``idle_s`` at ``idle_w``,
    under ``limit_w``, where a stream of the products alone holds ``stream_mhz``: the clock at which the step's
    average power is the limit, no higher than ``peak_mhz`` and, while no kernel switches more than the stream, no
    lower than ``stream_mhz``. ``others``: tensor-core work of its own activity, each ``(seconds, stream_seconds,
    at_mhz)``: its seconds at the peak's clock (peak / f times that at f, like the products) and the seconds a stream
    that holds ``at_mhz`` at the limit would take at the same tensor-core issue (its activity over the stream's
    times its seconds): its power is the floor plus that share of the stream's part above it (:func:`class_w`)."""
    if limit_w <= floor_w():
        raise ValueError(f"a limit of {limit_w:g} W is at or below the power curve's floor ({floor_w():.0f} W)")
    tensor = dots_s + sum(t for t, _, _ in others)
    if tensor <= 0 or stream_mhz >= peak_mhz:
        return peak_mhz if tensor <= 0 else stream_mhz

    def excess(f: float) -> float:  # energy above the limit over the step (J); increasing in f
        work = dots_s * (stream_w(f, stream_mhz, limit_w) - limit_w)
        work += sum(class_w(f, t, w, at, limit_w) - t * limit_w for t, w, at in others)
        return work * peak_mhz / f + memory_s * (memory_w - limit_w) + idle_s * (idle_w - limit_w)

    if excess(peak_mhz) <= 0:
        return peak_mhz
    lo = stream_mhz
    while excess(lo) > 0:  # a kernel switching more than the stream: the step holds a clock below the stream's
        lo /= 2
    if excess(lo) >= 0:
        return lo
    return _bisect(excess, lo, peak_mhz)


def class_w(mhz: float, seconds: float, stream_seconds: float, at_mhz: float, limit_w: float) -> float:
    """Energy per second of peak-clock time (W x s) of ``seconds`` of tensor-core work at ``mhz`` whose tensor cores
    issue as much as ``stream_seconds`` of the stream that holds ``at_mhz`` at ``limit_w``: the floor through all of
    its time, and the stream's part above the floor through the stream's seconds (dynamic power is linear in the
    switching activity: P = P0 + a (CURVE(f) - P0), :func:`stream_w`)."""
    p0 = floor_w()
    return seconds * p0 + stream_seconds * (stream_w(mhz, at_mhz, limit_w) - p0)

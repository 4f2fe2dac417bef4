"""Sliding-window (band) masks read from the IR (issue 25): the fused attention kernel is priced for the key tiles
it visits, the program's FLOPs stay what the IR says; a causal mask is priced as before, and a mask the rule
cannot read (passed in as an input) is priced as a dense attention, never as a band."""
import json

import jax
import jax.numpy as jnp
import pytest

from mhlo_cost import Study
from mhlo_cost.analysis import analyze
from mhlo_cost.cli import main
from mhlo_cost.machines.hardware import get_profile
from mhlo_cost.roofline.attention import find_attention
from mhlo_cost.roofline.band import mask_fraction, visited_fraction
from mhlo_cost.roofline.estimate import Roofline
from mhlo_cost.walk.options import AnalysisOptions

B, H, S, D, W = 1, 8, 4096, 128, 512
T = 128  # the profiles' attention tile (asserted below)
A100 = get_profile("a100")
BF16 = jnp.bfloat16


def attn(q, k, v, mask=None, kind=""):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)
    i = jax.lax.iota(jnp.int32, S)
    if kind == "band":
        mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < W)
    elif kind == "causal":
        mask = i[:, None] >= i[None, :]
    if kind == "band-inverted":  # the same band, spelled the other way round
        s = jnp.where(~((i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < W)), -jnp.inf, s)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1).astype(q.dtype), v)


def lowered(kind: str) -> str:
    x = jax.ShapeDtypeStruct((B, H, S, D), BF16)
    if kind == "input":
        m = jax.ShapeDtypeStruct((S, S), jnp.bool_)
        return jax.jit(lambda q, k, v, m: attn(q, k, v, mask=m)).lower(x, x, x, m).as_text()
    return jax.jit(lambda q, k, v: attn(q, k, v, kind=kind)).lower(x, x, x).as_text()


# Closed forms (tile t = 128, S = 4096: n = 32 query and key tiles; 1024 blocks in all).
N = S // T
#: Query tile j holds rows 128 j .. 128 j + 127; it keeps keys q - 511 .. q: key tiles j - 4 .. j (the first ones
#: clipped at 0): min(j + 1, ceil(512 / 128) + 1) = min(j + 1, 5) tiles.
BAND_TILES = sum(min(j + 1, -(-W // T) + 1) for j in range(N))
CAUSAL_TILES = N * (N + 1) // 2  # query tile j visits key tiles 0 .. j


def test_the_closed_forms():
    assert BAND_TILES == 1 + 2 + 3 + 4 + 28 * 5 == 150 and CAUSAL_TILES == 528
    assert A100.attention.tile == T == get_profile("h100").attention.tile


def kernel_compute(kind: str, records=("masks",)):
    a = analyze(lowered(kind), AnalysisOptions(dataflow=True, records=records))
    rf = Roofline(a, A100, fuse_mode="elementwise")
    (k,) = [k for k in rf.fusion.kernels if k.attention]
    assert a.summary["gemm_flops"] == 4 * B * H * S * S * D  # the program's FLOPs: what the IR says
    return a, k.compute_s


def test_a_band_mask_is_priced_for_the_key_tiles_it_visits():
    a, band = kernel_compute("band")
    (att,) = find_attention(a.rows, a.producers)
    assert mask_fraction(a.rows, a.producers, a.record("masks"), att.members, T) == BAND_TILES / N ** 2
    _, causal = kernel_compute("causal")
    _, dense = kernel_compute("")
    assert band / dense == pytest.approx(BAND_TILES / N ** 2, rel=1e-9)
    assert band / causal == pytest.approx(BAND_TILES / CAUSAL_TILES, rel=1e-9)  # 150 / 528: below causal


def test_a_band_spelled_the_other_way_round_is_read_alike():
    _, inverted = kernel_compute("band-inverted")
    _, band = kernel_compute("band")
    assert inverted == band


def test_a_causal_mask_is_priced_as_before():
    a, causal = kernel_compute("causal")
    (att,) = find_attention(a.rows, a.producers)
    assert mask_fraction(a.rows, a.producers, a.record("masks"), att.members, T) == CAUSAL_TILES / N ** 2
    _, without_record = kernel_compute("causal", records=())
    _, dense = kernel_compute("")
    assert causal == without_record
    assert causal / dense == pytest.approx((N + 1) / (2 * N), rel=1e-9)


def test_a_mask_passed_in_is_not_read_and_is_priced_dense():
    a, given = kernel_compute("input")
    (att,) = find_attention(a.rows, a.producers)
    assert mask_fraction(a.rows, a.producers, a.record("masks"), att.members, T) is None
    _, dense = kernel_compute("")
    assert given == pytest.approx(dense, rel=1e-12)


def test_the_backward_kernel_of_a_band_is_priced_for_its_tiles_too():
    x = jax.ShapeDtypeStruct((B, H, S, D), BF16)
    got = {}
    for kind in ("band", "causal", ""):
        loss = lambda q, k, v, w: (attn(q, k, v, kind=kind).astype(jnp.float32) ** 2 * w).sum()  # noqa: E731
        text = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x, x).as_text()
        a = analyze(text, AnalysisOptions(dataflow=True, records=("masks",)))
        got[kind] = [k.compute_s for k in Roofline(a, A100, fuse_mode="elementwise").fusion.kernels if k.attention]
        assert len(got[kind]) == 2  # the forward kernel and the backward one
    f_band, f_causal = BAND_TILES / N ** 2, (N + 1) / (2 * N)
    band, causal, dense = (got[kind][0] for kind in ("band", "causal", ""))
    assert band / dense == pytest.approx(f_band, rel=1e-9)
    assert causal / dense == pytest.approx(f_causal, rel=1e-9)
    # the backward kernel: its products over the tiles visited, plus its two memory passes (D = rowsum(dO * O)
    # and the dQ accumulator's, over Q-sized tensors: the same under any mask). One pass time P must explain both
    # masks: band = P + (dense - P) f_band and causal = P + (dense - P) f_causal
    band, causal, dense = (got[kind][1] for kind in ("band", "causal", ""))
    passes = (band - f_band * dense) / (1 - f_band)
    assert 0 < passes < 0.5 * dense
    assert causal == pytest.approx(passes + (dense - passes) * f_causal, rel=1e-9)


@pytest.mark.parametrize("sq, w, t", [(4096, 512, 128), (1000, 100, 64), (300, 1, 128), (256, 256, 16)])
def test_visited_tiles_of_a_band_match_a_direct_count(sq, w, t):
    cons = ((1, -1, 0, "GE"), (1, -1, -w, "LT"))  # q - k >= 0 and q - k - w < 0
    n = -(-sq // t)
    blocks = sum(len({k // t for q in range(qt * t, min(sq, qt * t + t)) for k in range(max(0, q - w + 1), q + 1)})
                 for qt in range(n))  # every kept (q, k), by brute force
    assert visited_fraction(cons, sq, sq, t) == blocks / n ** 2


@pytest.mark.parametrize("execution", ["compiled", "eager"])
def test_the_study_reads_the_mask_in_the_readers_child(tmp_path, execution):
    paths = {}
    for kind in ("band", "causal"):
        paths[kind] = tmp_path / f"{kind}.mlir"
        paths[kind].write_text(lowered(kind))
    got = {}
    for kind, p in paths.items():
        s = Study(str(p), hardware="a100", execution=execution, isolate=True)  # walked in the child: over the wire
        assert s.analysis.record("masks")  # the record came back
        (k,) = [k for k in s.roofline.fusion.kernels if k.attention]
        got[kind] = k.compute_s
        assert s.analysis.summary["gemm_flops"] == 4 * B * H * S * S * D
    assert got["band"] / got["causal"] == pytest.approx(BAND_TILES / CAUSAL_TILES, rel=1e-9)


def test_report_prices_a_band_below_causal_as_the_api_does(tmp_path, capsys):
    got = {}
    for kind in ("band", "causal"):
        p = tmp_path / f"{kind}.mlir"
        p.write_text(lowered(kind))
        assert main(["report", str(p), "--hardware", "a100", "--execution", "compiled", "--format", "json"]) == 0
        got[kind] = json.loads(capsys.readouterr().out)["summary"]
        assert got[kind]["gemm_flops"] == 4 * B * H * S * S * D
    api = Study(str(tmp_path / "band.mlir"), hardware="a100", execution="compiled").roofline.totals()
    assert got["band"]["est_time_fused_s"] == api["est_time_fused_s"]
    assert got["band"]["est_time_fused_s"] < got["causal"]["est_time_fused_s"]

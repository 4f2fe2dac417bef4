"""Attention in the eager model as the program calls it (issue 35, item 1): a library kernel only for a
``scaled_dot_product_attention`` call, recognised from a real torchax lowering's call sites; attention written
out is its kernels, the scores and probabilities in the eager peak (closed forms); ``--sdpa`` chooses the
backend of SDPA calls only, and one the shapes or the chip cannot run is refused in one line."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mhlo_cost import lower_model  # noqa: E402
from mhlo_cost.analysis import AnalysisOptions, analyze  # noqa: E402
from mhlo_cost.machines.hardware import get_profile  # noqa: E402
from mhlo_cost.roofline.eager import eager  # noqa: E402
from mhlo_cost.roofline.memory import eager_profile  # noqa: E402
from mhlo_cost.roofline.sdpa import BackendError, is_sdpa_call  # noqa: E402

B, H, S, D = 1, 2, 128, 16
#: The scalar constants a lowered softmax holds (its reductions' initial values): a few f32 beside the tensors.
SCALARS = 64


class _Written(nn.Module):
    def forward(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return p @ v


class _Sdpa(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class _Both(nn.Module):
    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k, v)
        return a + torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def _analysis(module, dtype: str):
    with torch.device("meta"):
        m = module()
    text = lower_model(m, *[f"{B}x{H}x{S}x{D}:{dtype}"] * 3, frontend="torchax").text
    return analyze(text, AnalysisOptions(dataflow=True))


@pytest.fixture(scope="module")
def written():
    return _analysis(_Written, "float32")


@pytest.fixture(scope="module")
def sdpa_f32():
    return _analysis(_Sdpa, "float32")


def test_written_attention_kernels_and_peak_closed_form(written):
    """q @ k^T, softmax, @ v written out in f32: three kernels; the scores kernel writes B H S S x 4 bytes, the
    softmax reads and writes as much, the output product reads the probabilities and v; the eager peak is q, k,
    v with the scores and the probabilities live together while the softmax runs."""
    f = eager(written, get_profile("a100"))
    ks = [k for k in f.kernels if k.bytes_read or k.bytes_written]
    scores, qkv = B * H * S * S * 4, B * H * S * D * 4
    assert not any(k.attention for k in ks)
    assert [k.bytes_written for k in ks] == [scores, scores, qkv]
    assert ks[0].bytes_read == 2 * qkv
    # the softmax reads each row twice (max and sum, then the output): its second read misses in the A100's 40 MiB L2
    # on at most scores x scores / L2 bytes (every row in flight at once: 1 - exp(-x) <= x)
    reread = -(-scores * scores // (40 * 2**20))
    assert 0 <= ks[1].bytes_read - scores < SCALARS + reread
    assert ks[2].bytes_read == scores + qkv
    peak = eager_profile(written, f).peak_bytes
    assert 0 <= peak - (3 * qkv + 2 * scores) < SCALARS
    assert f.sdpa_note == "1 written out, run as written"


def test_sdpa_call_peak_closed_form(sdpa_f32):
    """One scaled_dot_product_attention call: one kernel (f32: PyTorch's choice is mem_efficient, flash takes
    f16/bf16 only), the scores never stored: the eager peak is q, k, v and the output."""
    f = eager(sdpa_f32, get_profile("a100"))
    att = [k for k in f.kernels if k.attention]
    assert [k.backend for k in att] == ["mem_efficient"]
    qkv = B * H * S * D * 4
    assert 0 <= eager_profile(sdpa_f32, f).peak_bytes - 4 * qkv < SCALARS
    assert "mem_efficient (no mem_efficient model: priced as fa2)" in f.sdpa_note
    # the math backend: PyTorch's math path writes the scores and the probabilities
    m = eager(sdpa_f32, get_profile("a100"), sdpa="math")
    assert not any(k.attention for k in m.kernels)
    assert eager_profile(sdpa_f32, m).peak_bytes - (3 * qkv + 2 * B * H * S * S * 4) in range(SCALARS)


def test_sdpa_call_recognised_from_the_lowering():
    """Of two attentions in one forward, the SDPA call (both products at one call site) is the library kernel;
    the one written out (a site per product) runs as written, whatever the backend asked for."""
    from mhlo_cost.roofline.attention import find_attention

    a = _analysis(_Both, "bfloat16")
    found = find_attention(a.rows, a.producers)
    assert len(found) == 2
    assert sorted(is_sdpa_call(a.rows, att) for att in found) == [False, True]
    for backend in ("auto", "flash", "mem_efficient"):
        f = eager(a, get_profile("a100"), sdpa=backend)
        att = [k for k in f.kernels if k.attention]
        assert [k.backend for k in att] == ["flash" if backend == "auto" else backend]
        assert max(k.bytes_written for k in f.kernels) == B * H * S * S * 2  # the written-out scores, bf16
    taken = eager(a, get_profile("a100"), written="sdpa")
    assert sum(k.attention for k in taken.kernels) == 2


def test_impossible_backend_refused(sdpa_f32):
    """flash on f32 and cuDNN on a chip with no cuDNN attention model are refused, not replaced."""
    with pytest.raises(BackendError, match="flash takes f16 or bf16, not f32"):
        eager(sdpa_f32, get_profile("a100"), sdpa="flash")
    bf16 = _analysis(_Sdpa, "bfloat16")
    with pytest.raises(BackendError, match="a100-sxm-80gb has no cuDNN attention model"):
        eager(bf16, get_profile("a100"), sdpa="cudnn")
    f = eager(bf16, get_profile("h100"), sdpa="cudnn")
    assert [(k.backend, k.library) for k in f.kernels if k.attention] == [("cudnn", "cudnn")]


def test_refusal_is_one_line(tmp_path, capsys):
    from mhlo_cost.cli import main

    with torch.device("meta"):
        m = _Sdpa()
    p = tmp_path / "a.mlir"
    p.write_text(lower_model(m, *[f"{B}x{H}x{S}x{D}:float32"] * 3, frontend="torchax").text)
    args = ["report", str(p), "--hardware", "a100", "--execution", "eager", "-q"]
    assert main(args + ["--sdpa", "flash"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mhlo-cost: error: --sdpa flash: flash takes f16 or bf16, not f32")
    assert main(args + ["--format", "csv"]) == 0
    assert "sdpa,1 mem_efficient (no mem_efficient model: priced as fa2)" in capsys.readouterr().out


def test_jax_program_attention_taken_as_sdpa_call():
    """A program lowered from JAX carries no torch call stacks: its attention is taken as an SDPA call."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(q, k, v):
        return jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2), axis=-1) @ v

    x = jax.ShapeDtypeStruct((B, H, S, D), jnp.bfloat16)
    text = jax.jit(f).lower(x, x, x).as_text(debug_info=True)
    a = analyze(text, AnalysisOptions(dataflow=True))
    fus = eager(a, get_profile("a100"))
    assert [k.backend for k in fus.kernels if k.attention] == ["flash"]

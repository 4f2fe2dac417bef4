"""scripts/dump_mhlo.py (the old name of `mhlo-cost lower`), the frontend registry and the GPT example."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
from dataclasses import replace

import jax
import numpy as np
import pytest

from mhlo_cost import analyze
from mhlo_cost.lower import frontends
from mhlo_cost.lower.frontends import FrontendError, dump, make_config
from mhlo_cost.lower.models import gpt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "dump_mhlo.py")
sys.path.insert(0, os.path.dirname(__file__))
from stdit3_formula import gemm_flops  # noqa: E402
from stderr_lines import error_line  # noqa: E402


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def one_line(stderr: str) -> str:
    return error_line(stderr)


def test_gpt_to_file(tmp_path):
    out = tmp_path / "gpt.mlir"
    r = run("--model", "gpt", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith("#loc") or text.startswith("module")
    assert "jit(gpt)/layers.0/attn/dot_general" in text
    assert "peak RSS" in r.stderr and " s," in r.stderr
    a = analyze(text)
    c = gpt.GPTConfig()
    per_layer = 2 * c.batch * c.seq * c.hidden * (3 * c.hidden + c.hidden + 2 * c.mlp_hidden) \
        + 2 * 2 * c.batch * c.seq * c.seq * c.hidden
    assert a.summary["gemm_flops"] == c.layers * per_layer + 2 * c.batch * c.seq * c.hidden * c.vocab


def test_small_stdit3_gz_and_refuses_overwrite(tmp_path):
    out = tmp_path / "small.mlir.gz"
    r = run("--model", "stdit3", "--small", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = gzip.decompress(out.read_bytes()).decode()
    assert "jit(stdit3)/spatial_blocks.1/attn/" in text
    assert analyze(text).summary["gemm_flops"] == gemm_flops(make_config("stdit3", small=True))["total"]

    before = out.read_bytes()
    r = run("--model", "stdit3", "--small", "-o", str(out))  # re-running replaces the IR it wrote
    assert r.returncode == 0 and "replacing" in r.stderr
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(before)
    notes = tmp_path / "notes.mlir"
    notes.write_text("my notes, not IR\n")
    r = run("--model", "stdit3", "--small", "-o", str(notes))  # anything else needs --force
    assert r.returncode == 2
    assert "exists" in one_line(r.stderr) and "--force" in r.stderr
    assert notes.read_text() == "my notes, not IR\n"
    r = run("--model", "gpt", "--layers", "1", "-o", str(tmp_path / "new" / "dir" / "g.mlir"))  # folders made
    assert r.returncode == 0, r.stderr and (tmp_path / "new" / "dir" / "g.mlir").exists()
    r = run("--model", "stdit3", "--small", "--depth", "1", "-o", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert "temporal_blocks.1" not in gzip.decompress(out.read_bytes()).decode()


def test_list():
    r = run("--list")
    assert r.returncode == 0, r.stderr
    assert "stdit3" in r.stdout and "gpt" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "204_640_360" in ln)
    assert "T=60" in line and "S=920" in line
    line = next(ln for ln in r.stdout.splitlines() if "102_1280_720" in ln)
    assert "T=30" in line and "S=3600" in line


def test_no_locations_to_stdout():
    r = run("--model", "stdit3", "--small", "--no-locations")
    assert r.returncode == 0, r.stderr
    assert "stablehlo.dot_general" in r.stdout
    assert "loc(" not in r.stdout
    for name in ("spatial_blocks", "temporal_blocks", "cross_attn", "jit(stdit3)/"):
        assert name not in r.stdout


def test_errors_are_one_line(tmp_path):
    r = run("--model", "stdit3", "--shape", "12_34")
    assert r.returncode != 0 and "FRAMES_WIDTH_HEIGHT" in one_line(r.stderr)
    r = run("--model", "gpt", "--hidden", "100", "--heads", "3")
    assert r.returncode != 0 and "multiple of heads" in one_line(r.stderr)
    r = run("--model", "stdit3", "--nope")
    assert r.returncode == 2 and "unrecognized" in one_line(r.stderr)
    (tmp_path / "a_file").write_text("")
    r = run("--model", "gpt", "-o", str(tmp_path / "a_file" / "x.mlir"))  # a folder that cannot be made
    assert r.returncode == 2 and "is not a folder" in r.stderr.splitlines()[-1] and "Traceback" not in r.stderr


def test_dump_in_process_bytecode_and_formats(tmp_path):
    res = dump("gpt", make_config("gpt", layers=2, scan=True), str(tmp_path / "g.mlirbc"))
    data = (tmp_path / "g.mlirbc").read_bytes()
    assert res.format == "bytecode" and data[:4] == b"ML\xefR" and res.nbytes == len(data)
    text = frontends.to_text(data)
    assert "stablehlo.while" in text
    with pytest.raises(FileExistsError):
        dump("gpt", None, str(tmp_path / "g.mlirbc"))
    res = dump("gpt", None, None, locations=False)
    assert res.text and "loc(" not in res.text and res.path is None
    assert frontends.output_format("a.mlirbc.gz") == ("bytecode", True)
    assert frontends.output_format("a.mlir") == ("text", False)


def test_make_config_overrides():
    c = make_config("stdit3", shape="408_640_360", batch=1, tokens=120, dtype="bf16", depth=3)
    assert (c.tokens_t, c.tokens_s, c.batch, c.caption_tokens, c.depth, c.dtype) == (120, 920, 1, 120, 3,
                                                                                     "bfloat16")
    c = make_config("stdit3", small=True)
    assert (c.depth, c.hidden, c.heads) == (2, 64, 4)
    c = make_config("gpt", tokens=64, layers=2, scan=True, dtype="f32")
    assert (c.seq, c.layers, c.scan, c.dtype) == (64, 2, True, "float32")
    with pytest.raises(FrontendError):
        make_config("gpt", depth=3)
    with pytest.raises(FrontendError):
        make_config("resnet")


def test_frontend_registry(monkeypatch):
    assert set(frontends.FRONTENDS) == {"jax", "torchax", "torch-xla"}
    assert frontends.get_frontend("jax").lower("gpt", None).text
    with pytest.raises(FrontendError, match="unknown frontend"):
        frontends.get_frontend("tf")
    monkeypatch.setitem(frontends.FRONTENDS, "fake", "mhlo_cost.lower.frontends.no_such_frontend")
    with pytest.raises(FrontendError, match="not available"):
        frontends.get_frontend("fake")
    with pytest.raises(ValueError):
        frontends.Lowered()


def test_jax_path_does_not_import_torch():
    code = ("import sys; from mhlo_cost.lower.frontends import dump, make_config; "
            "dump('stdit3', make_config('stdit3', small=True)); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


def test_gpt_scan_equals_unrolled():
    cfg = gpt.GPTConfig(layers=3, hidden=64, heads=4, seq=16, vocab=97, dtype="float32")
    p = gpt.init_params(cfg, jax.random.key(0))
    stacked = dict(p, layers=jax.tree_util.tree_map(lambda *a: np.stack(a), *p["layers"]))
    tokens = np.arange(2 * 16).reshape(2, 16).astype(np.int32) % 97
    a = jax.jit(gpt.make_forward(cfg))(p, tokens)
    b = jax.jit(gpt.make_forward(replace(cfg, scan=True)))(stacked, tokens)
    assert a.shape == (2, 16, 97)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    # causal: the logits of position 3 do not depend on later tokens
    t2 = tokens.copy()
    t2[:, 5:] = 0
    c = jax.jit(gpt.make_forward(cfg))(p, t2)
    np.testing.assert_allclose(np.asarray(a[:, :4]), np.asarray(c[:, :4]), rtol=1e-5, atol=1e-5)


def test_parallel_dump(tmp_path):
    """--parallel lowers STDiT3 with explicit collectives on an abstract mesh (no devices needed)."""
    from stdit3_formula import comm_bytes

    from mhlo_cost.lower.models import parallel

    out = tmp_path / "tp.mlir"
    r = run("--model", "stdit3", "--small", "--parallel", "megatron", "--devices", "4", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "megatron over 4 devices" in r.stderr
    cfg = make_config("stdit3", small=True)
    assert analyze(out.read_text()).summary["comm_bytes"] == comm_bytes(cfg, "megatron", (4,))["total"]
    out = tmp_path / "2d.mlirbc"
    r = run("--model", "stdit3", "--small", "--parallel", "2d", "--mesh", "2x2", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = frontends.to_text(out.read_bytes())
    assert "stablehlo.reduce_scatter" in text and '"spatial_blocks.0/mlp/reduce_scatter"' in text
    assert analyze(text).summary["comm_bytes"] == comm_bytes(cfg, "2d", (2, 2))["total"]
    from mhlo_cost.cli import cmd_lower

    assert parallel.STRATEGIES == cmd_lower.PARALLEL


def test_parallel_errors_are_one_line():
    r = run("--model", "stdit3", "--small", "--parallel", "ulysses", "--devices", "8")
    assert r.returncode == 2 and "heads (4) must be a multiple of 8" in one_line(r.stderr)
    r = run("--model", "gpt", "--parallel", "ring", "--devices", "4")
    assert r.returncode == 2 and "stdit3 only" in one_line(r.stderr)
    r = run("--model", "stdit3", "--devices", "4")
    assert r.returncode == 2 and "need a --parallel" in one_line(r.stderr)
    r = run("--model", "stdit3", "--parallel", "ring")
    assert r.returncode == 2 and "--devices" in one_line(r.stderr)
    r = run("--model", "stdit3", "--parallel", "2d", "--devices", "16", "--mesh", "4x4")
    assert r.returncode == 2 and "batch (2)" in one_line(r.stderr)
    r = run("--model", "stdit3", "--parallel", "tp", "--devices", "4")
    assert r.returncode == 2 and "invalid choice" in one_line(r.stderr)


USER_MODULE = '''
import jax.numpy as jnp


def make_jax():
    return lambda x: jnp.tanh(x @ jnp.ones((64, 32), x.dtype))


def make_torch():
    import torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 256)
            self.fc2 = torch.nn.Linear(256, 64)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    return MLP()
'''


def _dump_user_module(tmp_path, factory, frontend):
    import os

    (tmp_path / "usermod.py").write_text(USER_MODULE)
    out = tmp_path / f"{factory}.mlir"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    p = subprocess.run([sys.executable, SCRIPT, "--module", f"usermod:{factory}", "--input-shape", "2,16,64",
                        "--frontend", frontend, "-o", str(out)], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def test_user_jax_function_through_module_flag(tmp_path):
    from mhlo_cost import analyze

    out = _dump_user_module(tmp_path, "make_jax", "jax")
    assert analyze(out).summary["gemm_flops"] == 2 * (2 * 16) * 32 * 64


def test_user_torch_module_through_torchax(tmp_path):
    import pytest

    pytest.importorskip("torch")
    from mhlo_cost import analyze

    out = _dump_user_module(tmp_path, "make_torch", "torchax")
    a = analyze(out)
    assert a.summary["gemm_flops"] == 2 * (2 * 16) * 64 * 256 * 2
    assert {"fc1", "fc2"} <= {r.scope.split("/")[0] for r in a.rows if r.gemm_flops}

"""``lower --model stdit3 --deployed`` and ``sweep --deployed``: the torch STDiT3 as OpenSora 1.2 deploys it, reached
with a flag (issue 35, item 4). The flag lowers the module ``stdit3_torch.build(cfg, deployed=True)`` builds, through
torchax; what it cannot be (another frontend, a parallel strategy, a training step, another model) is refused in
one line, and a sweep skips such points with that reason."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from mhlo_cost import analyze, lower_model  # noqa: E402
from mhlo_cost.cli import main  # noqa: E402
from mhlo_cost.lower.models import stdit3_torch  # noqa: E402
from mhlo_cost.lower.models.config import STDiT3Config  # noqa: E402
from stderr_lines import error_line  # noqa: E402

SMALL = ["--model", "stdit3", "--small"]


def _module_gemm_flops(deployed: bool) -> int:
    """GEMM FLOPs of the small torch STDiT3 built directly (the counting or the deployed module), f32."""
    cfg = STDiT3Config().small()
    m = stdit3_torch.build(cfg, deployed=deployed)
    specs = [f"{'x'.join(map(str, s))}:{str(t).replace('torch.', '')}" for s, t in stdit3_torch.input_specs(cfg)]
    return analyze(lower_model(m, *specs, frontend="torchax").text).summary["gemm_flops"]


def test_lower_deployed_is_the_deployed_module(tmp_path, capsys):
    """The flag's IR counts what the deployed module counts, and not what the counting module does (its
    per-sample cross-attention has 1/B of the dense products: tests/test_deployed.py has the closed form)."""
    out = tmp_path / "dep.mlir"
    assert main(["lower", *SMALL, "--deployed", "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert "stdit3_torch_deployed.py" in text  # the deployed blocks' source positions in the locations
    got = analyze(text).summary["gemm_flops"]
    deployed, counting = _module_gemm_flops(True), _module_gemm_flops(False)
    assert deployed != counting
    assert got == deployed


@pytest.mark.parametrize("extra, says", [
    (["--parallel", "ulysses", "--devices", "2"], "takes no --parallel"),
    (["--frontend", "jax"], "lowers with torchax, not jax"),
    (["--train"], "no training step"),
])
def test_lower_deployed_refuses_what_it_cannot_be(tmp_path, capsys, extra, says):
    out = tmp_path / "x.mlir"
    assert main(["lower", *SMALL, "--deployed", *extra, "-o", str(out)]) == 2
    assert says in error_line(capsys.readouterr().err)
    assert not out.exists()


def test_lower_deployed_is_for_stdit3_only(tmp_path, capsys):
    assert main(["lower", "--model", "gpt", "--deployed", "-o", str(tmp_path / "x.mlir")]) == 2
    assert "--model stdit3 only" in error_line(capsys.readouterr().err)


def test_sweep_deployed_lowers_the_module_and_skips_strategies(tmp_path, capsys):
    """A sweep point with --deployed is the deployed module (its GEMM FLOPs, bf16 as the sweep lowers); a
    strategy point is skipped with the reason, not lowered from the JAX model behind the user's back."""
    out = tmp_path / "t.json"
    assert main(["sweep", *SMALL, "--depth", "1", "--deployed", "--strategies", "none:1", "ulysses:2",
                 "--hardware", "a100", "--execution", "eager", "--jobs", "1", "--cache-dir", str(tmp_path / "c"),
                 "-o", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["parallel"], r["status"].split(":")[0]) for r in rows] == [("none", "ok"), ("ulysses", "skipped")]
    assert "takes no --parallel" in rows[1]["status"] + rows[1].get("reason", "")
    mlir = tmp_path / "dep.mlir"
    assert main(["lower", *SMALL, "--depth", "1", "--dtype", "bf16", "--deployed", "-o", str(mlir), "-q"]) == 0
    assert rows[0]["gemm_flops"] == analyze(mlir.read_text()).summary["gemm_flops"]
    plain = tmp_path / "jax.mlir"
    assert main(["lower", *SMALL, "--depth", "1", "--dtype", "bf16", "-o", str(plain), "-q"]) == 0
    assert rows[0]["gemm_flops"] != analyze(plain.read_text()).summary["gemm_flops"]

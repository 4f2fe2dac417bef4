"""The package as a user gets it: a wheel, installed (not editable) in a fresh virtual environment that
sees this environment's packages (jax, torch, ...), then `mhlo-cost lower` and `mhlo-cost report`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.wheel


def _copy_sources(dst: str) -> None:
    """The files a wheel is built from (no virtual environments, caches or build leftovers)."""
    keep = ("mhlo_cost", "pyproject.toml", "README.md", "LICENSE")
    for name in keep:
        src = os.path.join(ROOT, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif os.path.exists(src):
            shutil.copy2(src, dst)


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def test_wheel_installs_and_lowers(tmp_path):
    src, dist, env = tmp_path / "src", tmp_path / "dist", tmp_path / "venv"
    src.mkdir()
    _copy_sources(str(src))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)])
    wheels = list(dist.glob("mhlo_cost-*.whl"))
    assert len(wheels) == 1
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    purelib = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # The fresh environment sees this one's packages (jax, numpy, pandas, torch) after its own.
    with open(os.path.join(purelib, "_shared_packages.pth"), "w") as f:
        f.write("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheels[0])])
    where = _run([str(py), "-c", "import mhlo_cost; print(mhlo_cost.__file__)"], cwd=tmp_path).stdout.strip()
    assert where.startswith(purelib), where  # the installed copy, not this checkout
    exe = str(env / "bin" / "mhlo-cost")
    _run([exe, "lower", "--model", "gpt", "--layers", "2", "-o", "gpt.mlir"], cwd=tmp_path)
    r = _run([exe, "report", "gpt.mlir", "--by", "block"], cwd=tmp_path)
    assert "layers.1" in r.stdout and "blocks by scope: 2 found" in r.stderr
    r = _run([exe, "hardware"], cwd=tmp_path)
    assert "h100" in r.stdout  # the package data came along

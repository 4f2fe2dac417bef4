"""``mhlo-cost plot``: a PNG of the blocks of a small STDiT3, with and without a hardware profile."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.cli import main
from stderr_lines import error_lines

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "stdit3_small.mlir"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "dump_mhlo.py"), "--model", "stdit3", "--small",
                        "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("extra", [[], ["--hardware", "h100"], ["--hardware", "a100", "--fuse", "elementwise"]])
def test_plot_writes_a_png(small, tmp_path, capsys, extra):
    out = tmp_path / "blocks.png"
    assert main(["plot", str(small), "-o", str(out), "-q", *extra]) == 0
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000
    assert capsys.readouterr().err == ""  # -q: not even "wrote"


def test_plot_other_block_methods_and_svg(small, tmp_path):
    out = tmp_path / "blocks.svg"
    assert main(["plot", str(small), "-o", str(out), "-q", "--blocks", "rms", "--hardware", "h100"]) == 0
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_the_same_plot_is_the_same_bytes(small, tmp_path, suffix):
    """Output is deterministic: matplotlib writes the date into an SVG and a PDF and draws an SVG's element ids
    from a random salt, unless told not to."""
    files = [tmp_path / f"{k}.{suffix}" for k in "ab"]
    for f in files:
        assert main(["plot", str(small), "-o", str(f), "-q", "--hardware", "h100"]) == 0
    assert files[0].read_bytes() == files[1].read_bytes()


def test_plot_bad_output_name_and_hardware(small, tmp_path, capsys):
    assert main(["plot", str(small), "-o", str(tmp_path / "blocks.txt"), "-q"]) == 2
    assert main(["plot", str(small), "-o", str(tmp_path / "b.png"), "--hardware", "nope", "-q"]) == 2
    assert len(error_lines(capsys.readouterr().err)) == 2

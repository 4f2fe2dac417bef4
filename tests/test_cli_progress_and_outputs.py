"""Issue 27, the command line's first hour: progress only where a person watches, one -o rule, a `lower` that
fails fast and shows its stages, IR that names files relative to their package, STDiT3 shape typos noted.

Every check reads stderr's error line (tests/stderr_lines.py), never the number of lines, and none has a
wall-clock limit: the subprocesses' timeouts are hang guards."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mhlo_cost.cli import build_parser, main
from mhlo_cost.files.console import Console, Progress, progress_wanted
from stderr_lines import error_line

ROOT = Path(__file__).resolve().parents[1]
GPT = ROOT / "examples" / "gpt_small.mlir"
UNKNOWN = """
func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}
"""


@pytest.fixture(autouse=True)
def own_ledger(tmp_path, monkeypatch):
    """The record of files mhlo-cost wrote lives under this test's folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def cli(*argv, cwd=None, env=None, pre=""):
    """``python -m mhlo_cost ARGV`` in a fresh interpreter (stderr a pipe, as in CI); ``pre``: Python run
    first (to block an import). Returns (exit code, stdout, stderr, the modules it had imported)."""
    code = textwrap.dedent(f"""
        import sys
        {pre}
        from mhlo_cost.cli import main
        rc = main({[str(a) for a in argv]!r})
        sys.stdout.flush()
        print("\\nMODULES", *sorted(m for m in ("torch", "jax", "transformers") if sys.modules.get(m)))
        sys.exit(rc)
    """)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **(env or {})}
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd or ROOT, env=full_env, capture_output=True, text=True,
                       timeout=900)  # a hang guard
    out, _, mods = r.stdout.rpartition("\nMODULES")
    return r.returncode, out, r.stderr, set(mods.split())


# -- 1. progress ----------------------------------------------------------------------------------------------


def test_progress_only_on_a_terminal_or_when_asked(monkeypatch):
    def wanted(argv):
        args = build_parser().parse_args(argv)
        return progress_wanted(args.quiet, args.progress)

    parse = build_parser().parse_args
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert not wanted(["report", str(GPT)])  # a pipe, a file, a CI log
    assert wanted(["report", str(GPT), "--progress"])
    assert not wanted(["report", str(GPT), "--progress", "-q"])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert wanted(["report", str(GPT)])
    assert not wanted(["report", str(GPT), "-q"])
    for argv in (["blocks", str(GPT)], ["plot", str(GPT), "-o", "x.png"], ["sweep"], ["calibrate"], ["lower"],
                 ["baseline", str(GPT), "-o", "b.json"], ["check", str(GPT), "--baseline", "b"], ["diff", "a", "b"]):
        assert parse([*argv, "--progress"]).progress, argv


def test_a_pipe_gets_no_progress_and_progress_comes_when_asked(tmp_path):
    rc, out, err, _ = cli("report", GPT, "--format", "csv")
    assert rc == 0 and "parsing" not in err and "counting" not in err
    rc, out, err, _ = cli("report", GPT, "--format", "csv", "--progress")
    assert rc == 0 and f"mhlo-cost: parsing {GPT}" in err and "mhlo-cost: counting" in err


def test_the_error_line_is_the_last_even_with_progress(tmp_path):
    bad = tmp_path / "unknown.mlir"
    bad.write_text(UNKNOWN)
    rc, _, err, _ = cli("report", bad, "--strict", "--progress")
    assert rc == 2 and "mhlo-cost: parsing" in err  # progress was shown, then the error, last
    assert "my_kernel" in error_line(err)


def test_a_timer_that_fires_after_the_error_prints_nothing(capsys):
    console = Console(progress=True)
    p = console.progress()
    p.tty, p.delay = False, 0.2
    p.stage("parsing a big file")  # would print at 0.2 s
    console.stop()  # what main() does before an error line
    time.sleep(0.5)
    assert capsys.readouterr().err == ""
    assert p.closed


def test_a_terminal_line_is_drawn_in_place_with_a_bar(capsys):
    p = Progress(enabled=True, delay=0.0, tty=True)
    p.count(3, 10, "sweep", "points")
    p.close()
    err = capsys.readouterr().err
    assert err.startswith("\r\x1b[K") and "sweep [" + "#" * 6 + "." * 14 + "] 3/10 points" in err
    assert err.endswith("\r\x1b[K")  # cleared: what follows starts on a line of its own


# -- 3. one -o rule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["report", str(GPT)], ["blocks", str(GPT)], ["report", str(GPT), "--format", "html"],
                                     ["check", str(GPT), "--baseline", "{base}"], ["diff", str(GPT), str(GPT)]])
def test_every_o_refuses_a_file_it_did_not_write(tmp_path, capsys, command):
    base = tmp_path / "base.json"
    assert main(["baseline", str(GPT), "-o", str(base), "-q"]) == 0
    argv = [a.format(base=base) for a in command]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main([*argv, "-o", str(notes), "-q"]) == 2
    assert "--force" in error_line(capsys.readouterr().err) and notes.read_text() == "my notes\n"
    if argv[0] == "check":  # writes its table only where a count moved (none here): refused before any work
        return
    assert main([*argv, "-o", str(notes), "-q", "--force"]) in (0, 1)
    written = notes.read_text()
    assert written != "my notes\n"
    assert main([*argv, "-o", str(notes)]) in (0, 1)  # its own file, unchanged since: replaced, with a note
    assert f"mhlo-cost: replacing {notes}" in capsys.readouterr().err
    notes.write_text(written + "my edit\n")  # edited since: the user's now
    assert main([*argv, "-o", str(notes), "-q"]) == 2
    assert "did not write" in error_line(capsys.readouterr().err)


def test_plot_follows_the_same_rule(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pic = tmp_path / "blocks.png"
    pic.write_bytes(b"not mine")
    assert main(["plot", str(GPT), "-o", str(pic), "-q"]) == 2
    assert "--force" in error_line(capsys.readouterr().err) and pic.read_bytes() == b"not mine"
    assert main(["plot", str(GPT), "-o", str(pic), "-q", "--force"]) == 0
    assert main(["plot", str(GPT), "-o", str(pic), "-q"]) == 0 and pic.read_bytes()[:4] == b"\x89PNG"


def test_baseline_update_replaces_a_baseline_only(tmp_path, capsys):
    base = tmp_path / "b.flops.json"
    assert main(["baseline", str(GPT), "-o", str(base), "-q"]) == 0
    assert main(["baseline", str(GPT), "-o", str(base), "-q"]) == 2  # a reference: not replaced by a re-run
    assert "--update" in error_line(capsys.readouterr().err)
    assert main(["baseline", str(GPT), "-o", str(base), "--update"]) == 0
    assert "no count changed" in capsys.readouterr().err
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    assert main(["baseline", str(GPT), "-o", str(notes), "--update", "-q"]) == 2
    assert "not a baseline" in error_line(capsys.readouterr().err) and notes.read_text() == '{"mine": 1}\n'


def test_lower_refuses_before_any_import(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    rc, _, err, mods = cli("lower", "--model", "gpt", "-o", notes)
    assert rc == 2 and "--force" in error_line(err) and notes.read_text() == "my notes\n"
    assert "jax" not in mods


# -- 4. lower: fast failures, stages --------------------------------------------------------------------------


def test_a_misspelt_class_is_named_before_torch_is_imported():
    pytest.importorskip("transformers")
    rc, _, err, mods = cli("lower", "--hf", "LlamaForCausalLMM", "--config", "llama", "--input", "1x8:int64")
    assert rc == 2 and "did you mean LlamaForCausalLM" in error_line(err)
    assert "torch" not in mods


def test_a_bad_input_shape_is_named_before_any_import():
    rc, _, err, mods = cli("lower", "--hf", "LlamaForCausalLM", "--input", "1xQ:int64")
    assert rc == 2 and "1xQ" in error_line(err)
    assert "torch" not in mods and "transformers" not in mods


@pytest.mark.parametrize("argv,blocked,extra", [
    (["--model", "stdit3", "--small", "--frontend", "torchax"], "torch", "torch"),
    (["--module", "m:f", "--frontend", "torchax", "--input", "2x2"], "torchax", "torch"),
    (["--hf", "LlamaForCausalLM", "--config", "llama", "--input", "1x8:int64"], "transformers", "models"),
    (["--hf", "LlamaForCausalLM", "--config", "llama", "--input", "1x8:int64"], "torch", "models"),
    (["--diffusers", "DiTTransformer2DModel", "--input", "1x4x8x8"], "diffusers", "models"),
])
def test_a_missing_extra_is_one_line_naming_pip_install(argv, blocked, extra):
    """The module blocked as if not installed (None in sys.modules: its import fails)."""
    rc, _, err, _ = cli("lower", *argv, pre=f"sys.modules[{blocked!r}] = None")
    assert rc == 2
    assert f"pip install 'mhlo-cost[{extra}]'" in error_line(err) and blocked in error_line(err)


def test_lower_shows_its_stages_when_asked(tmp_path):
    out = tmp_path / "g.mlir"
    rc, _, err, _ = cli("lower", "--model", "gpt", "--layers", "1", "-o", out, "--progress")
    assert rc == 0 and out.exists()
    stages = [ln for ln in err.splitlines() if ln.startswith("mhlo-cost: ") and ln.endswith("s)")]
    assert [s.split(" (")[0] for s in stages] == ["mhlo-cost: checking the options",
                                                 "mhlo-cost: tracing and lowering with jax",
                                                 f"mhlo-cost: writing {out}"]
    rc, _, err, _ = cli("lower", "--model", "gpt", "--layers", "1", "-o", out)  # a pipe: none; its IR: replaced
    assert rc == 0 and "checking the options" not in err and "tracing" not in err and "replacing" in err


# -- 5. the IR names files relative to their package ----------------------------------------------------------


def test_the_same_model_lowered_from_two_installs_is_the_same_bytes(tmp_path):
    """The package at two paths, run from two folders: byte-identical IR, with no absolute path in it (the
    same command line: its frames are in the locations too, with their columns)."""
    outs = []
    for where in ("a", "deeper/b"):
        home = tmp_path / where
        shutil.copytree(ROOT / "mhlo_cost", home / "mhlo_cost", ignore=shutil.ignore_patterns("__pycache__"))
        run_in = tmp_path / f"run-{where.replace('/', '-')}"
        run_in.mkdir()
        out = run_in / "g.mlir"
        rc, _, err, _ = cli("lower", "--model", "gpt", "--layers", "1", "-o", "g.mlir", "-q", cwd=run_in,
                            env={"PYTHONPATH": str(home)})
        assert rc == 0, err
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    text = outs[0].decode()
    assert "mhlo_cost/lower/models/gpt.py" in text  # the files are named, relative to their package root
    for absolute in ('"/', str(tmp_path), str(Path.home()), "site-packages", str(ROOT)):
        assert absolute not in text, absolute


def test_the_command_that_drives_a_lowering_leaves_no_frame_in_the_ir(tmp_path):
    """`python -m mhlo_cost lower` and `python -c 'main(...)'` write the same bytes: the locations hold the
    model's frames, none of the command line's, the frontends' or runpy's."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = ["lower", "--model", "gpt", "--layers", "1", "-q", "--force", "-o"]
    a = subprocess.run([sys.executable, "-m", "mhlo_cost", *argv, "a.mlir"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    code = f"import sys; from mhlo_cost.cli import main; sys.exit(main({[*argv, 'b.mlir']!r}))"
    b = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    text = (tmp_path / "a.mlir").read_text()
    assert text == (tmp_path / "b.mlir").read_text()
    for driver in ("mhlo_cost/cli/", "mhlo_cost/lower/frontends/", "mhlo_cost/__main__.py", "runpy", "<string>"):
        assert driver not in text, driver
    assert "mhlo_cost/lower/models/gpt.py" in text


# -- 6. STDiT3 shapes -----------------------------------------------------------------------------------------


def test_an_unpublished_stdit3_shape_is_lowered_with_a_visible_note(tmp_path):
    # 204 frames -> 5 x (204 // 17) = 60 latent frames; 640 x 36 pixels -> 80 x 4 latent (8 x 8 VAE);
    # patches of 1 x 2 x 2: T = 60, S = (4 / 2) x (80 / 2) = 80, so 4,800 tokens a sample (204_640_360: 60 x 920)
    rc, _, err, _ = cli("lower", "--model", "stdit3", "--small", "--shape", "204_640_36", "-q", "-o",
                        tmp_path / "s.mlir")
    assert rc == 0 and (tmp_path / "s.mlir").exists()
    note = [ln for ln in err.splitlines() if "204_640_36 " in ln]
    assert len(note) == 1 and "not a published STDiT3 shape" in note[0]
    assert "204_640_360, 408_640_360, 51_1280_720, 102_1280_720" in note[0]
    assert "T=60 x S=80 = 4,800 tokens" in note[0]
    rc, _, err, _ = cli("lower", "--model", "stdit3", "--small", "--shape", "204_640_360", "-q", "-o",
                        tmp_path / "p.mlir")
    assert rc == 0 and "published" not in err


def test_sweep_bar_when_asked_and_its_shape_notes(tmp_path, capsys):
    argv = ["sweep", "--model", "stdit3", "--small", "--depth", "1", "--shape", "204_640_36", "--hardware", "h100",
            "--no-cache", "-j", "1", "--format", "csv"]
    assert main([*argv, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "mhlo-cost: sweep [" + "#" * 20 + "] 1/1 points" in err
    assert "warning: 204_640_36 is not a published STDiT3 shape" in err and "T=60 x S=80" in err
    assert main([*argv, "-q"]) == 0
    err = capsys.readouterr().err  # -q: no bar, but the shape's warning all the same
    assert "sweep [" not in err and "204_640_36 is not a published" in err

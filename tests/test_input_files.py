"""Issue 24, items 1, 6 and 12: no native abort from a location string that is not UTF-8, and a
command-line FILE is a path (a regular file, read with a limit), never MLIR text.

The location fixtures each made the process abort (SIGABRT, exit 134) before the fix; they run in a
subprocess so that an abort fails the test instead of ending the test run. Expected names come from
Python's own ``bytes.decode("utf-8", "replace")`` of the bytes the program spells.
"""
from __future__ import annotations

import csv
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import fuzz_locations
from mhlo_cost.files import read as files
from mhlo_cost.cli import main
from stderr_lines import error_line

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "reliability3" / "input"
ADD = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def _u(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


#: fixture -> [(op, scope, location)] as the op table must show them.
EXPECTED = {
    "loc_name_escape.mlir": [("stablehlo.add", _u(b"caf\xe9"), "")],
    "loc_fused_callsite.mlir": [("stablehlo.add", _u(b"caf\xe9"), "a.py:1"),
                                ("stablehlo.multiply", _u(b"g\xff"), "b.py:7"),
                                ("stablehlo.tanh", _u(b"h\xe2\x82"), _u(b"c\xc0.py") + ":9")],
    "loc_file_arg_valid.mlir": [("stablehlo.add", "", _u(b"caf\xe9.py") + ":3"),
                                ("stablehlo.multiply", b"caf\xc3\xa9".decode(), "")],  # valid UTF-8 stays
    "loc_flip.mlirbc": [("stablehlo.add", _u(b"mk\xb0006"), ""), ("stablehlo.exponential", "mk0001", ""),
                        ("stablehlo.tanh", "mk0008", ""), ("stablehlo.dot_general", "mk0009", "")],
}


def _run(args, env=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "mhlo_cost", *map(str, args)], capture_output=True,
                          timeout=600, env=env, stdin=stdin)


def _ops(stdout: bytes) -> list[tuple[str, str, str]]:
    return [(r["op"], r["scope"], r["location"]) for r in csv.DictReader(io.StringIO(stdout.decode("utf-8")))]


@pytest.mark.parametrize("isolate", ["1", "0"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_location_not_utf8_is_read_with_replacement_not_an_abort(name, isolate):
    env = dict(os.environ, MHLO_COST_ISOLATE=isolate)
    r = _run(["report", FIX / name, "--by", "op", "--format", "csv", "-q"], env=env)
    assert r.returncode == 0, (r.returncode, r.stderr[-300:])
    assert _ops(r.stdout) == EXPECTED[name]


def test_every_fixture_has_its_expectation():
    assert sorted(p.name for p in FIX.iterdir() if p.suffix in (".mlir", ".mlirbc")) == sorted(EXPECTED)


def test_only_bad_locations_are_rewritten():
    from jaxlib.mlir import ir

    from mhlo_cost.ir.reader import clean_locations, make_context

    ctx = make_context()
    with ctx:
        module = ir.Module.parse((FIX / "loc_fused_callsite.mlir").read_text())
    # fused + its name, callsite + its callee name, name + its child file: 6 distinct locations
    assert clean_locations(module.operation) == 6
    assert clean_locations(module.operation) == 0  # what it wrote is UTF-8 throughout
    with ctx:
        module = ir.Module.parse(ADD)
    assert clean_locations(module.operation) == 0


def _report_each(paths) -> dict[str, int]:
    """Exit code of ``mhlo-cost report`` per file, each in its own process (in process, with main(), the
    same inputs did not abort before the fix: the command did)."""
    codes = {}
    for i, p in enumerate(sorted(paths)):
        view = ["--by", "op", "--format", "csv"] if i % 2 else []
        r = _run(["report", p, "-q", *view])
        codes[p.name] = r.returncode
        assert r.returncode in (0, 2), (p.name, r.returncode, r.stderr[-300:])
    return codes


def test_generated_location_inputs_all_report(tmp_path):
    """Location fuzz (tests/fuzz_locations.py): two inputs of every kind."""
    rng = random.Random(2024)
    for i in range(8):
        suffix, data = fuzz_locations.mutant(rng, fuzz_locations.KINDS[i % len(fuzz_locations.KINDS)])
        (tmp_path / f"m{i:02d}{suffix}").write_bytes(data)
    assert set(_report_each(tmp_path.iterdir()).values()) == {0}


def test_campaign_crashers_report():
    """One input of each kind that aborted in benchmarks/fuzz_locations.py before the fix (159 of 200 did:
    text, gzip and bytecode with escapes in names, and bytecode with a location byte flipped)."""
    codes = _report_each((FIX / "campaign").iterdir())
    assert len(codes) == 4 and set(codes.values()) == {0}, codes


def test_flipped_bytecode_changes_one_byte_of_a_location_string_to_one_past_ascii():
    data = fuzz_locations.flipped_bytecode(random.Random(5))
    text, marks = fuzz_locations.marked_program(random.Random(5))
    clean = fuzz_locations.bytecode(text)
    changed = [i for i, (a, b) in enumerate(zip(clean, data)) if a != b]
    assert len(data) == len(clean) and len(changed) == 1 and data[changed[0]] >= 0x80
    assert any(clean.find(m) <= changed[0] < clean.find(m) + len(m) for m in marks)


# -- item 6: a command-line FILE is a path ---------------------------------------------------------------


def _error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("mhlo-cost: error: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("name", ["a{b}.mlir", "module {}", "two\nlines.mlir"])
def test_a_file_name_that_looks_like_text_is_opened(tmp_path, capsys, name):
    p = tmp_path / name
    p.write_text(ADD)
    assert main(["report", str(p), "--format", "csv"]) == 0
    rows = dict(line.split(",", 1) for line in capsys.readouterr().out.splitlines())
    assert rows["vector_flops"] == "4"  # one add of 4 elements, read from the file


def test_a_file_name_that_is_not_there_is_not_parsed_as_text(tmp_path, capsys):
    assert main(["report", str(tmp_path / "module {}")]) == 2
    assert _error(capsys).endswith("module {}: no such file")


def test_a_name_longer_than_a_path_can_be(capsys):
    assert main(["report", "m" * 5000]) == 2
    assert "cannot read: File name too long" in _error(capsys)


def test_a_device_is_refused_unread(capsys):
    assert main(["report", "/dev/zero"]) == 2
    assert _error(capsys) == "mhlo-cost: error: /dev/zero: is a device, not an MLIR file"


def test_a_directory_is_refused(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert _error(capsys).endswith(f"{tmp_path}: is a directory, not an MLIR file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.mlir"
    os.mkfifo(fifo)
    r = _run(["report", fifo])  # (a subprocess: a regression would block, and the timeout ends it)
    assert r.returncode == 2
    assert b"is a FIFO (named pipe), not an MLIR file" in r.stderr and b"standard input" in r.stderr


def test_a_file_past_the_limit_is_refused(tmp_path, capsys, monkeypatch):
    p = tmp_path / "big.mlir"
    p.write_text(ADD)
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", len(ADD) - 1)
    assert main(["report", str(p)]) == 2
    assert f"more than {len(ADD) - 1} bytes, the most mhlo-cost reads" in _error(capsys)
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", len(ADD))
    assert main(["report", str(p), "-q"]) == 0


def test_a_sparse_file_past_the_limit_is_refused_by_its_size(tmp_path, capsys):
    p = tmp_path / "sparse.mlir"
    with open(p, "wb") as f:
        f.truncate(files.MAX_INPUT_BYTES + 1)  # no data written: read, it would be 2 GiB of zeros
    assert main(["report", str(p)]) == 2
    assert "more than 2048 MiB" in _error(capsys)


def test_standard_input_past_the_limit_is_refused(capsys, monkeypatch):
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", 10)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(ADD.encode())))
    assert main(["report", "-"]) == 2
    assert _error(capsys) == ("mhlo-cost: error: -: more than 10 bytes, the most mhlo-cost reads: not IR as a "
                              "compiler writes it (or a model with its weights inlined)")


def test_the_python_api_still_takes_text():
    from mhlo_cost import analyze

    assert analyze(ADD).summary["vector_flops"] == 4


def test_a_file_name_beginning_with_a_dash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("-weird.mlir").write_text(ADD)
    assert main(["report", "-q", "--format", "csv", "--", "-weird.mlir"]) == 0
    assert "vector_flops,4" in capsys.readouterr().out
    assert main(["report", "-weird.mlir"]) == 2
    line = _error(capsys)
    assert "-weird.mlir was read as an option" in line and "-- -weird.mlir" in line and "./-weird.mlir" in line


def test_a_value_beginning_with_a_dash(capsys):
    assert main(["report", "x.mlir", "-o", "-out.csv"]) == 2
    assert _error(capsys).endswith("(a value beginning with '-' is written with '=': --output=-out.csv)")
    assert main(["report"]) == 2
    assert _error(capsys) == "mhlo-cost: error: the following arguments are required: file"


# -- settings files are read as MLIR files are: devices, FIFOs and directories refused, never opened ----------

@pytest.mark.parametrize("argv", [
    ["hardware", "--hardware-file", "{bad}"],
    ["report", str(ROOT / "examples" / "gpt_small.mlir"), "--hardware-file", "{bad}", "--hardware", "x"],
    ["check", str(ROOT / "examples" / "gpt_small.mlir"), "--baseline", "{bad}"],
    ["sweep", "--spec", "{bad}"],
])
@pytest.mark.parametrize("bad", ["fifo", "/dev/zero", "dir"])
def test_settings_files_that_are_not_regular_files_are_one_line(tmp_path, argv, bad):
    fifo, folder = tmp_path / "fifo", tmp_path / "dir"
    os.mkfifo(fifo)
    folder.mkdir()
    where = {"fifo": str(fifo), "dir": str(folder)}.get(bad, bad)
    r = subprocess.run([sys.executable, "-m", "mhlo_cost", *[a.replace("{bad}", where) for a in argv]],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 2, r.stderr
    line = error_line(r.stderr)
    assert where in line and ("FIFO" in line or "device" in line or "directory" in line), line

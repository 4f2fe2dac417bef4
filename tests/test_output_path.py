"""One output path (issue 43): every file a command writes goes through one writer (mhlo_cost.files.write): a
temporary file beside the target, synced, then put over it, its hash recorded; one rule for every path (a file
mhlo-cost did not write needs --force, its own files known by the recorded hash only); every JSON strict."""
from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path

import pytest

from mhlo_cost.cli import main
from mhlo_cost.files import write as writer
from mhlo_cost.files.write import OutputError, claim, replacing, write
from stderr_lines import error_line

ROOT = Path(__file__).resolve().parents[1]
GPT = ROOT / "examples" / "gpt_small.mlir"
TINY_GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=2", "--set", "vocab=128"]
TINY_PLAN = ["--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128"]


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    """A ledger of this test's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _strict(text: str):
    """JSON as a strict parser reads it: a bare NaN or Infinity is an error."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- the writer ------------------------------------------------------------------------------------------------


def test_the_writer_replaces_its_own_file_and_refuses_any_other(tmp_path):
    out = tmp_path / "out.txt"
    assert claim(out) is None  # nothing there
    write(out, "one\n")
    assert out.read_text() == "one\n" and claim(out) == f"replacing {out} (written by mhlo-cost before)"
    write(out, "two\n")
    assert out.read_text() == "two\n"
    out.write_text("two\nedited\n")  # the user's now: the hash no longer matches
    with pytest.raises(OutputError, match="did not write it: add --force"):
        claim(out)
    assert claim(out, force=True) is None
    with pytest.raises(OutputError, match="is a folder"):
        claim(tmp_path)
    assert _leftovers(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    out = tmp_path / "keep.txt"
    write(out, "old\n")
    with pytest.raises(RuntimeError):
        with replacing(out) as tmp:
            Path(tmp).write_text("half of the new")
            raise RuntimeError("killed while writing")
    assert out.read_text() == "old\n" and _leftovers(tmp_path) == []

    def full(*a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(writer.os, "fsync", full)
    with pytest.raises(OutputError) as e:
        write(out, "new\n")
    assert str(e.value) == f"{out}: cannot write: {os.strerror(errno.ENOSPC)}" and "\n" not in str(e.value)
    assert out.read_text() == "old\n" and _leftovers(tmp_path) == []
    assert claim(out) is not None  # still recorded as mhlo-cost's (the old content's hash)


def test_a_writer_killed_between_the_rename_and_the_ledger_leaves_a_file_it_knows(tmp_path, monkeypatch):
    """Killed just after the rename, before the ledger's last update (record never runs): the new file is still
    mhlo-cost's; killed just before the rename (the ledger told of the new file already): the old one is."""
    out = tmp_path / "out.txt"
    write(out, "old\n")
    record = writer.record
    monkeypatch.setattr(writer, "record", lambda path, digest: None)
    write(out, "new\n")
    assert out.read_text() == "new\n" and claim(out) is not None
    monkeypatch.setattr(writer, "record", record)

    rename = os.replace

    def killed(src, dst):
        if os.fspath(dst) == str(out):
            raise KeyboardInterrupt  # (as a kill: nothing after it runs)
        rename(src, dst)  # (the ledger's own)
    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write(out, "newer\n")
    monkeypatch.setattr(os, "replace", rename)
    assert out.read_text() == "new\n" and claim(out) is not None
    out.write_text("newer\n")  # the bytes the killed writer meant to write, put there by hand: the ledger knew
    assert claim(out) is not None  # them as what was about to be written, so they pass too
    out.write_text("the user's\n")
    with pytest.raises(OutputError, match="did not write it"):
        claim(out)


def test_a_link_is_the_file_it_points_to(tmp_path):
    target = tmp_path / "real" / "table.csv"
    target.parent.mkdir()
    link = tmp_path / "link.csv"
    link.symlink_to(target)  # dangling: the target is made
    write(link, "a,b\n")
    assert link.is_symlink() and target.read_text() == "a,b\n"
    assert claim(target) and claim(link)  # one file, one record
    target.write_text("theirs\n")
    with pytest.raises(OutputError, match="did not write"):
        claim(link)


def test_a_missing_folder_is_made_and_a_file_in_the_way_refused(tmp_path):
    out = tmp_path / "new" / "deeper" / "out.json"
    assert claim(out) is None
    write(out, "{}\n")
    assert out.read_text() == "{}\n"
    (tmp_path / "plain").write_text("x")
    with pytest.raises(OutputError, match="is not a folder"):
        claim(tmp_path / "plain" / "out.json")


def test_a_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(writer.os, "access", lambda path, mode: False)  # (root may write anywhere)
    with pytest.raises(OutputError, match="is not writable"):
        claim(tmp_path / "out.txt")


def test_a_device_is_written_in_place_not_replaced(tmp_path):
    assert claim("/dev/null") is None
    write("/dev/null", "nothing\n")
    assert Path("/dev/null").is_char_device()


# -- every command: a file mhlo-cost did not write is refused before any work ----------------------------------


COMMANDS = {
    "report": ["report", str(GPT), "-o", "{out}"],
    "report-html": ["report", str(GPT), "--format", "html", "-o", "{out}"],
    "blocks": ["blocks", str(GPT), "-o", "{out}"],
    "check": ["check", str(GPT), "--baseline", str(GPT), "-o", "{out}"],
    "diff": ["diff", str(GPT), str(GPT), "-o", "{out}"],
    "lower": ["lower", "--model", "gpt", "--layers", "1", "-o", "{out}"],
    "lower-step": ["lower", *TINY_GPT, "--decode", "-o", "{out}"],
    "serve": ["serve", *TINY_GPT, "--decode", "--no-cache", "-o", "{out}"],
    "serve-plot": ["serve", *TINY_GPT, "--decode", "--batches", "1,2", "--no-cache", "--plot", "{out}"],
    "train-plan": ["train-plan", *TINY_PLAN, "-o", "{out}"],
    "sweep": ["sweep", "--model", "gpt", "--no-cache", "-o", "{out}"],
    "plot": ["plot", str(GPT), "-o", "{out}"],
    "calibrate": ["calibrate", "--quick", "-o", "{out}"],
    "baseline": ["baseline", str(GPT), "-o", "{out}"],
    "baseline-update": ["baseline", str(GPT), "--update", "-o", "{out}"],
    "rules": ["rules", "-o", "{out}"],
    "whatif": ["whatif", str(GPT), "--hardware", "h100", "-o", "{out}"],
    "whatif-plot": ["whatif", str(GPT), "--hardware", "h100", "-o", "{out}"],
}
NAMES = {"report-html": "mine.html", "serve-plot": "mine.png", "plot": "mine.png", "lower": "mine.mlir",
         "lower-step": "mine.mlir", "sweep": "mine.csv", "calibrate": "mine.toml", "whatif-plot": "mine.png"}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_file_it_did_not_write(command, tmp_path, capsys):
    out = tmp_path / NAMES.get(command, "mine.txt")
    out.write_text("my notes\n")
    argv = [a.format(out=out) for a in COMMANDS[command]]
    assert main(argv) == 2
    line = error_line(capsys.readouterr().err)
    assert str(out) in line and "--force" in line
    assert out.read_text() == "my notes\n"


def test_lower_knows_its_files_by_their_hash_not_their_first_bytes(tmp_path, capsys):
    """Before: any gzip file (a backup.tar.gz) or any text starting with module, #loc or func was lower's own."""
    backup = tmp_path / "backup.tar.gz"
    backup.write_bytes(gzip.compress(b"my backup", mtime=0))
    notes = tmp_path / "notes.mlir"
    notes.write_text("module notes: not written by mhlo-cost\n")
    for out in (backup, notes):
        before = out.read_bytes()
        assert main(["lower", "--model", "gpt", "--layers", "1", "-o", str(out), "-q"]) == 2
        assert "--force" in error_line(capsys.readouterr().err) and out.read_bytes() == before
    mine = tmp_path / "gpt.mlir.gz"
    assert main(["lower", "--model", "gpt", "--layers", "1", "-o", str(mine), "-q"]) == 0
    assert main(["lower", "--model", "gpt", "--layers", "1", "-o", str(mine)]) == 0  # its own: replaced
    assert f"replacing {mine}" in capsys.readouterr().err
    head = mine.read_bytes()[:10]  # gzip's header: no time stamp, no file name (the same input, the same bytes)
    assert head[:3] == b"\x1f\x8b\x08" and head[3] & 0x08 == 0 and head[4:8] == bytes(4)


def test_train_plan_writes_through_the_rule_and_its_json_is_strict(tmp_path, capsys, monkeypatch):
    """Before: ``train-plan -o n.txt`` exited 0 and replaced a file mhlo-cost did not write."""
    out = tmp_path / "n.txt"
    out.write_text("x\n")
    assert main(["train-plan", *TINY_PLAN, "-o", str(out)]) == 2 and out.read_text() == "x\n"
    capsys.readouterr()
    from mhlo_cost.studies.plan import plan as plan_module

    row = plan_module.Plan.row
    monkeypatch.setattr(plan_module.Plan, "row", lambda self: row(self) | {"mfu": float("nan")})
    assert main(["train-plan", *TINY_PLAN, "--format", "json", "-o", str(out), "--force", "-q"]) == 0
    doc = _strict(out.read_text())
    assert doc["config"]["mfu"] is None and any("non-finite" in n for n in doc["notes"])
    assert doc["config"]["config"].startswith("t1 p1 d1")
    assert [r["component"] for r in doc["rows"]][-1] == "TOTAL" and len(doc["stages"]) == 1
    assert main(["train-plan", *TINY_PLAN, "--format", "json", "-o", str(out)]) == 0  # its own now
    assert f"replacing {out}" in capsys.readouterr().err


def test_serve_plot_follows_the_rule_and_a_bad_name_is_one_line(tmp_path, capsys, monkeypatch):
    """Before: ``serve ... --plot p.png`` replaced any existing file; ``--plot p.txt`` exited 70."""
    picture = tmp_path / "p.png"
    picture.write_bytes(b"my picture")
    base = ["serve", *TINY_GPT, "--decode", "--batches", "1,2", "--no-cache", "-q"]
    assert main([*base, "--plot", str(picture)]) == 2 and picture.read_bytes() == b"my picture"
    assert "--force" in error_line(capsys.readouterr().err)
    assert main([*base, "--plot", str(tmp_path / "p.txt")]) == 2
    assert ".png, .svg or .pdf" in error_line(capsys.readouterr().err)
    from mhlo_cost.views import serve as views

    monkeypatch.setattr(views, "sweep_view", _with_nan(views.sweep_view))
    out = tmp_path / "sweep.json"
    assert main([*base, "--plot", str(picture), "--force", "--format", "json", "-o", str(out)]) == 0
    assert picture.read_bytes().startswith(b"\x89PNG")
    doc = _strict(out.read_text())
    assert [r["tokens_per_s"] for r in doc["rows"]] == [None, None]


def _with_nan(view):
    def patched(figs, df, title):
        table = view(figs, df, title)
        table.frame["tokens_per_s"] = float("nan")
        return table
    return patched


@pytest.mark.parametrize("command", ["report", "blocks"])
def test_report_and_blocks_json_is_strict_when_a_figure_is_not_finite(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MHLO_COST_ISOLATE", "0")  # composed in this process, where the patch is
    from mhlo_cost.views.figures import Figures

    frame = Figures.block_frame
    summary = Figures.summary
    monkeypatch.setattr(Figures, "block_frame", lambda self, *a: frame(self, *a).assign(ratio=float("inf")))
    monkeypatch.setattr(Figures, "summary", lambda self, *a: summary(self, *a) + [("ratio", float("nan"))])
    argv = [command, str(GPT), "--format", "json", "-q"] + (["--by", "block"] if command == "report" else [])
    assert main(argv) == 0
    doc = _strict(capsys.readouterr().out)
    assert {r["ratio"] for r in doc["rows"]} == {None} and "ratio" in doc["notes"][-1]
    if command == "report":
        assert main(["report", str(GPT), "--format", "json", "-q"]) == 0
        doc = _strict(capsys.readouterr().out)
        assert doc["summary"]["ratio"] is None


def test_sweep_and_baseline_json_are_strict():
    import pandas as pd

    from mhlo_cost.studies.baseline import Counts, to_json
    from mhlo_cost.studies.sweep.table import to_json as sweep_json

    doc = _strict(sweep_json(pd.DataFrame({"point": ["a"], "est_time_s": [float("inf")]}), {}))
    assert doc["rows"][0]["est_time_s"] is None
    text = to_json(Counts("m.mlir", {"gemm_flops": 2}, {"layers.0": {"gemm_flops": 2}}, "scope"))
    assert _strict(text)["summary"] == {"gemm_flops": 2}


def test_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path, capsys, monkeypatch):
    """Before: -o truncated the file and then wrote it (a failure between the two left it empty)."""
    out = tmp_path / "report.txt"
    assert main(["report", str(GPT), "-o", str(out), "-q"]) == 0
    before = out.read_text()

    def full(*a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(writer.os, "fsync", full)
    assert main(["report", str(GPT), "--by", "kind", "-o", str(out), "-q"]) == 2
    assert error_line(capsys.readouterr().err) == \
        f"mhlo-cost: error: {out}: cannot write: {os.strerror(errno.ENOSPC)}"
    assert out.read_text() == before and _leftovers(tmp_path) == []

"""mhlo-cost sweep: every number of a row is what lower + report / blocks give for the point alone; a Dask
LocalCluster gives the same bytes as the default executor; a stopped sweep resumes from its cache; points
that cannot be built are skipped with a reason and points that fail are rows with their error."""
from __future__ import annotations

import importlib.util
import json
import math
import re

import pytest

from mhlo_cost.cli import main
from mhlo_cost.lower.models.config import STDiT3Config
from stderr_lines import error_line

SMALL = ["--model", "stdit3", "--small", "--depth", "1", "--dtype", "bf16"]
FUSED_STEPS = ["--steps", "3", "--fuse", "elementwise"]


def sweep(tmp_path, capsys, *extra, name="t.json", cache="cache", rc=0):
    """Run the CLI in this process (``--jobs 1``: no pool); (table text, stderr); ``rc``: the exit it must give."""
    out = tmp_path / name
    got = main(["sweep", *SMALL, *FUSED_STEPS, "--cache-dir", str(tmp_path / cache), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert got == rc, err
    return (out.read_bytes() if name.endswith(".parquet") else out.read_text()), err


def report_of(tmp_path, capsys, parallel: str, devices: int, hw: str) -> tuple[dict, list[dict]]:
    """(report summary metrics, blocks rows) of the point alone, through lower and report / blocks."""
    mlir = tmp_path / f"{parallel}{devices}.mlir"
    plan = [] if parallel == "none" else ["--parallel", parallel, "--devices", str(devices)]
    assert main(["lower", *SMALL[:-2], "--dtype", "bf16", *plan, "-o", str(mlir), "--force", "-q"]) == 0
    assert main(["report", str(mlir), "--hardware", hw, *FUSED_STEPS, "--format", "json", "-q"]) == 0
    summary = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert main(["report", str(mlir), "--hardware", hw, "--fuse", "elementwise", "--by", "comm", "--format", "json",
                 "-q"]) == 0
    comm = json.loads(capsys.readouterr().out)["rows"]
    total = next(c for c in comm if c["op"] == "TOTAL")
    assert total["comm_exposed_fused_s"] == summary["comm_exposed_fused_s"]  # exposure with fused compute, one figure
    assert math.isclose(math.fsum(c["comm_exposed_fused_s"] for c in comm if c["op"] != "TOTAL"),
                        summary["comm_exposed_fused_s"], rel_tol=1e-12, abs_tol=1e-18)  # the collectives' own
    assert main(["blocks", str(mlir), "--hardware", hw, "--fuse", "elementwise", "--format", "json", "-q"]) == 0
    blocks = [b for b in json.loads(capsys.readouterr().out)["rows"] if b["block"] != "TOTAL"]
    return summary, blocks


def test_every_number_equals_report_and_blocks(tmp_path, capsys):
    text, _ = sweep(tmp_path, capsys, "--strategies", "none:1", "ulysses:2", "--hardware", "dgx-h100", "a100",
                    "--jobs", "1")
    rows = json.loads(text)["rows"]
    assert [(r["parallel"], r["hardware"], r["status"]) for r in rows] == [
        ("none", "dgx-h100", "ok"), ("none", "a100", "ok"), ("ulysses", "dgx-h100", "ok"), ("ulysses", "a100", "ok")]
    for row in rows:
        rep, blocks = report_of(tmp_path, capsys, row["parallel"], row["devices"], row["hardware"])
        for k in ("gemm_flops", "conv_flops", "vector_flops", "comm_bytes", "flops", "peak_bytes", "peak_bytes_fused",
                  "hbm_bytes"):
            assert type(row[k]) is int and row[k] == rep[k], k  # the same integer, never through a float
        for k in ("fits", "fits_fused", "est_time_s", "est_time_overlap_s", "est_time_fused_s",
                  "est_time_fused_overlap_s", "comm_time_s", "comm_exposed_s", "comm_exposed_fused_s", "utilisation",
                  "utilisation_fused"):
            assert row[k] == rep[k], k
        assert row["time_step_s"] == rep["est_time_fused_overlap_s"]
        assert row["time_run_s"] == rep["est_time_fused_overlap_s"] * 3 and row["steps"] == 3
        # The blocks partition the program: their integers add up to the row's.
        for k in ("gemm_flops", "vector_flops", "comm_bytes"):
            assert sum(b[k] for b in blocks) == row[k], k
        assert (row["comm_bytes"] > 0) == (row["parallel"] != "none")
        # The program's bound from the blocks' totals, by blocks' own rule.
        comm = math.fsum(b["comm_time_s"] for b in blocks)
        t = math.fsum(b["est_time_fused_s"] for b in blocks) - comm
        c = math.fsum(b["compute_bound_fused_s"] for b in blocks)
        rule = "comm" if comm > t else "compute" if c >= t / 2 else "memory"
        # memory -> overhead where the fixed costs outweigh the growing work (tests/test_exec_overhead_rule.py:
        # the program's bound is the block table's TOTAL row's)
        assert row["bound"] in ((rule, "overhead") if rule == "memory" else (rule,))


def test_invalid_points_are_skipped_and_failures_are_rows(tmp_path, capsys, monkeypatch):
    from mhlo_cost.studies.sweep import point

    real = point.lower_text

    def lower_text(p, options):
        if p.parallel == "ring":
            raise RuntimeError("the ring broke\nsecond line")
        return real(p, options)

    monkeypatch.setattr(point, "lower_text", lower_text)
    text, err = sweep(tmp_path, capsys, "--parallel", "none", "ulysses", "2d", "ring", "--devices", "1", "3",
                      "--hardware", "h100", "--jobs", "1", "--format", "csv", name="t.csv", rc=1)
    lines = text.splitlines()
    status = {tuple(line.split(",")[2:4]): line.split(",")[6:8] for line in lines[1:]}
    assert status[("none", "1")] == ["ok", ""]
    assert status[("none", "3")][0] == "skipped" and "one device" in status[("none", "3")][1]
    assert status[("ulysses", "1")][0] == "skipped"
    assert status[("2d", "3")][0] == "skipped" and "even" in status[("2d", "3")][1]
    assert status[("ring", "3")] == ["failed", "RuntimeError: the ring broke"]
    assert status[("ulysses", "3")][0] in ("ok", "skipped")  # 4 heads over 3 devices: skipped with its reason
    assert "1 failed" in err
    # exit 1 says some points failed, in one line with the first one's reason
    assert re.search(r"^mhlo-cost: sweep: 1 of \d+ point\(s\) failed; first: ring:3: RuntimeError: the ring broke ",
                     err, re.M)


def test_resume_recomputes_only_the_deleted_entry(tmp_path, capsys):
    args = ("--strategies", "none:1", "ulysses:2", "megatron:2", "--hardware", "dgx-h100", "--jobs", "1")
    first, err = sweep(tmp_path, capsys, *args)
    assert "3 computed, 0 cached" in err
    results = sorted((tmp_path / "cache" / "sweep" / "results").iterdir())
    assert len(results) == 3
    results[1].unlink()
    again, err = sweep(tmp_path, capsys, *args)
    assert "1 computed, 2 cached" in err
    assert again == first
    assert len(list((tmp_path / "cache" / "sweep" / "results").iterdir())) == 3
    # An option given at its default value (the batch of the bundled model) is the same point: all cached.
    default_batch = str(STDiT3Config().small().batch)
    _, err = sweep(tmp_path, capsys, *args, "--batch", default_batch)
    assert "0 computed, 3 cached" in err


def test_local_cluster_gives_the_same_bytes(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    args = ("--strategies", "none:1", "ulysses:2", "2d:4", "--hardware", "dgx-h100", "p4de", "--format", "csv")
    local, _ = sweep(tmp_path, capsys, *args, "--jobs", "2", name="local.csv", cache="c1")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        remote, err = sweep(tmp_path, capsys, *args, "--scheduler", cluster.scheduler_address, name="dask.csv",
                            cache="c2")
    assert "3 computed" in err
    assert remote == local
    assert local.count(",ok,") == 6


def test_best_parquet_and_errors(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    args = ("--strategies", "none:1", "ulysses:2", "--hardware", "dgx-h100", "a100", "--jobs", "1")
    text, _ = sweep(tmp_path, capsys, *args, "--best")
    rows = json.loads(text)["rows"]
    for hw in ("dgx-h100", "a100"):
        ranked = [r for r in rows if r["hardware"] == hw]
        assert [r["rank"] for r in ranked] == [1, 2]
        assert ranked[0]["time_step_s"] <= ranked[1]["time_step_s"]
    sweep(tmp_path, capsys, *args, name="t.parquet")
    table = pq.read_table(tmp_path / "t.parquet").to_pydict()
    full = json.loads(sweep(tmp_path, capsys, *args)[0])["rows"]
    assert table["gemm_flops"] == [r["gemm_flops"] for r in full]
    assert main(["sweep", *SMALL, "--hardware", "no-such-chip", "--no-cache"]) == 2
    assert main(["sweep", *SMALL, "--hardware", "h100", "--format", "parquet"]) == 2
    assert main(["sweep", *SMALL, "--hardware", "h100", "--format", "parquet", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "mhlo-cost: error: unknown hardware 'no-such-chip'" in err and "parquet needs -o" in err
    assert "Traceback" not in err


def test_plot_of_a_sweep_table(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    sweep(tmp_path, capsys, "--strategies", "none:1", "ulysses:2", "--hardware", "h100", "--jobs", "1",
          name="t.csv")
    png = tmp_path / "t.png"
    assert main(["plot", str(tmp_path / "t.csv"), "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(tmp_path / "t.csv"), "-o", str(png), "--hardware", "h100"]) == 2
    assert "do not apply" in capsys.readouterr().err


def test_spec_file_is_the_grid_of_the_flags(tmp_path):
    from pathlib import Path

    from mhlo_cost.cli import build_parser
    from mhlo_cost.cli.cmd_sweep import _settings
    from mhlo_cost.studies.sweep import make_grid

    spec = Path(__file__).parent.parent / "benchmarks" / "sweep_stdit3.toml"
    flags = ["sweep", "--shape", "204_640_360", "408_640_360", "51_1280_720", "102_1280_720", "--strategies",
             "none:1", "ulysses:8", "megatron:16", "2d:16", "ulysses:16", "ring:16", "--hardware", "dgx-a100",
             "dgx-h100", "--steps", "30", "--fuse", "elementwise", "--batch", "2"]
    by_flags = make_grid(_settings(build_parser().parse_args(flags)))
    by_spec = make_grid(_settings(build_parser().parse_args(["sweep", "--spec", str(spec)])))
    assert by_spec == by_flags and len(by_spec.points) == 24
    over = make_grid(_settings(build_parser().parse_args(["sweep", "--spec", str(spec), "--parallel", "ring",
                                                          "--devices", "4", "--shape", "51_1280_720"])))
    assert [(p.shape, p.parallel, p.devices) for p in over.points] == [("51_1280_720", "ring", 4)]
    bad = tmp_path / "bad.toml"
    bad.write_text('hardware = ["h100"]\nstrategy = ["ring:2"]\n')
    assert main(["sweep", "--spec", str(bad)]) == 2


LLAMA_SET = ["num_hidden_layers=2", "hidden_size=64", "intermediate_size=128", "num_attention_heads=4",
             "num_key_value_heads=2", "vocab_size=256", "attn_implementation=eager"]


def test_library_model_in_a_spec_equals_lower_and_report(tmp_path, capsys):
    pytest.importorskip("transformers")
    spec = tmp_path / "llama.toml"
    spec.write_text('hardware = ["h100"]\ndtype = ["f32"]\nstrategies = ["none:1", "ulysses:2"]\n'
                    '[[models]]\nname = "tiny-llama"\nhf = "LlamaForCausalLM"\nconfig = "llama"\n'
                    f"set = {json.dumps(LLAMA_SET)}\n" 'inputs = [["1x16:int64"], ["2x32:int64"]]\n')
    out = tmp_path / "t.json"
    assert main(["sweep", "--spec", str(spec), "--no-cache", "-j", "1", "-o", str(out), "-q"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["shape"], r["parallel"], r["status"]) for r in rows] == [
        ("tiny-llama", "1x16:int64", "none", "ok"), ("tiny-llama", "1x16:int64", "ulysses", "skipped"),
        ("tiny-llama", "2x32:int64", "none", "ok"), ("tiny-llama", "2x32:int64", "ulysses", "skipped")]
    mlir = tmp_path / "ll.mlir"
    sets = [a for s in LLAMA_SET for a in ("--set", s)]
    assert main(["lower", "--hf", "LlamaForCausalLM", "--config", "llama", *sets, "--input", "2x32:int64",
                 "--dtype", "f32", "-o", str(mlir), "-q"]) == 0
    assert main(["report", str(mlir), "--hardware", "h100", "--format", "json", "-q"]) == 0
    rep = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    for k in ("gemm_flops", "vector_flops", "peak_bytes", "est_time_s", "utilisation"):
        assert rows[2][k] == rep[k], k


def test_bad_settings_are_one_line(tmp_path, capsys):
    """A cache folder that is a file, a scheduler address that is not one, steps 0 or true: exit 2, one line."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    bad = [["--cache-dir", str(afile)], ["--no-cache", "--scheduler", "foo"], ["--no-cache", "--steps", "0"]]
    if importlib.util.find_spec("distributed") is None:
        bad.pop(1)
    for extra in bad:
        assert main(["sweep", *SMALL, "--hardware", "h100", "-q", *extra]) == 2, extra
        error_line(capsys.readouterr().err)
    spec = tmp_path / "s.toml"
    spec.write_text('model = "stdit3"\nhardware = ["h100"]\nsteps = true\n')
    assert main(["sweep", "--spec", str(spec), "--small", "--depth", "1", "--no-cache", "-q"]) == 2


def test_module_model_edit_is_a_new_point(tmp_path):
    """Editing the module a [[models]] entry names makes a new cache key: the counts follow the code (each run
    a process of its own, as from a terminal)."""
    import subprocess
    import sys

    (tmp_path / "edited_model.py").write_text("def make():\n    return lambda x: x @ x\n")
    (tmp_path / "s.toml").write_text('hardware = ["h100"]\n'
                                     'models = [{module = "edited_model:make", inputs = [["64x64:float32"]]}]\n')
    cmd = [sys.executable, "-m", "mhlo_cost", "sweep", "--spec", "s.toml", "--cache-dir", "c", "--format", "csv",
           "-q"]

    def gemm() -> int:
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
        return int(out[1].split(",")[out[0].split(",").index("gemm_flops")])

    assert gemm() == 2 * 64**3
    (tmp_path / "edited_model.py").write_text("def make():\n    return lambda x: (x @ x) @ x\n")
    assert gemm() == 2 * 2 * 64**3


def test_execution_inductor_rows_equal_report(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["sweep", *SMALL, "--execution", "inductor", "--strategies", "none:1", "--hardware", "a100",
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(out), "--jobs", "1", "-q"]) == 0
    row, = json.loads(out.read_text())["rows"]
    assert (row["execution"], row["status"]) == ("inductor", "ok")
    mlir = tmp_path / "p.mlir"
    assert main(["lower", *SMALL, "-o", str(mlir), "--force", "-q"]) == 0
    capsys.readouterr()
    assert main(["report", str(mlir), "--hardware", "a100", "--execution", "inductor", "--format", "json", "-q"]) == 0
    rep = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rep["est_time_fused_s"] > 0
    for k in ("est_time_fused_s", "est_time_fused_overlap_s", "peak_bytes_fused"):
        assert row[k] == rep[k], k
    assert main(["report", str(mlir), "--hardware", "a100", "--execution", "compiled", "--format", "json", "-q"]) == 0
    compiled = {r["metric"]: r["value"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert compiled["est_time_fused_s"] != row["est_time_fused_s"]  # the sweep ran Inductor, not the XLA-like model

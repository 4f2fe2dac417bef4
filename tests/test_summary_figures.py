"""The headline and the summary's figures (issue 27, items 6-9; issue 24, item 9).

* ``params`` counts every parameter as the frameworks do: equal to ``sum(p.numel() for p in
  model.parameters())`` for ResNet-18 (timm) and GPT-2 (transformers), and to the closed form of the
  bundled GPT's parameters; per block and per module (``--by tree``) too.
* the summary has the same figures in every format (table, CSV, JSON, Markdown, the HTML page), with a
  headline first and, with ``--fuse``, the fused execution's figures first;
* one figure, one meaning: the HTML memory chart peaks at the summary's ``peak_bytes``; one time unit per
  table; ``check`` counts the rows it lists; ``sweep --best`` has digits for small models;
* ``--block`` takes every row of the block table; the memory picture is scaled to the data.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from mhlo_cost.cli import main

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "gpt_small.mlir"
H100_FUSED = ["--hardware", "h100", "--fuse", "elementwise"]


def _gpt_params() -> dict[str, int]:
    """The bundled GPT's parameters in closed form, per top-level module: token and position embeddings,
    per layer two LayerNorms (scale, bias), qkv, proj, fc1, fc2 (weight, bias); ln_f; lm_head (weight, bias)."""
    from mhlo_cost.lower.models.gpt import GPTConfig

    c = GPTConfig()
    d, v, s, f = c.hidden, c.vocab, c.seq, c.mlp_ratio * c.hidden
    layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    return {"embed": v * d + s * d, "layer": layer, "layers": c.layers * layer, "ln_f": 2 * d,
            "lm_head": d * v + v}


def _out(capsys, *argv) -> str:
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def _csv_pairs(text: str) -> dict[str, str]:
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["metric", "value"]
    return dict(rows[1:])


# -- parameters ------------------------------------------------------------------------------------------------
def test_bundled_gpt_params_closed_form(capsys):
    from mhlo_cost import analyze

    p = _gpt_params()
    total = p["embed"] + p["layers"] + p["ln_f"] + p["lm_head"]
    a = analyze(GPT)
    assert a.summary["params"] == total == 3_717_632
    assert a.summary["param_bytes"] == 2 * total  # bf16: the same parameters, one definition
    assert a.summary["input_bytes"] == 4 * 2 * 128  # the tokens (int32) alone
    assert a.summary["macs"] * 2 == a.summary["gemm_flops"] + a.summary["conv_flops"]
    from mhlo_cost.views.headline import headline

    line = headline(list(a.summary.items()))
    assert "params 3.72 M" in line and "MACs 939.52 M" in line
    for block, want in (("lm_head", p["lm_head"]), ("embed", p["embed"]), ("layers.2", p["layer"])):
        s = _csv_pairs(_out(capsys, "report", GPT, "--block", block, "--format", "csv", "-q"))
        assert int(s["params"]) == want, block
    tree = list(csv.DictReader(io.StringIO(_out(capsys, "report", GPT, "--by", "tree:1", "--format", "csv", "-q"))))
    by_scope = {r["scope"]: int(r["params"]) for r in tree}
    assert by_scope["(all)"] == total and by_scope["layers.1"] == p["layer"] and by_scope["ln_f"] == p["ln_f"]


def test_plain_function_params_from_the_data_flow(tmp_path):
    """Arguments named by no parameter collection: the data flow decides (weights of the matrix products)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from mhlo_cost import analyze

    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((8, 64), (64, 256), (256, 32))]
    path = tmp_path / "mlp.mlir"
    path.write_text(jax.jit(mlp).lower(*args).as_text(debug_info=True))
    assert analyze(path).summary["params"] == 64 * 256 + 256 * 32


def test_named_params_include_biases_and_norms(tmp_path):
    """A JAX function of a ``params`` dict: every leaf of it is a parameter, the bias and the norm scale too;
    the optimizer state and the input are not."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from mhlo_cost import analyze

    def step(params, opt_state, x):
        y = jnp.tanh(x @ params["w"] + params["b"]) * params["scale"]
        return y, jax.tree.map(lambda m: 0.9 * m, opt_state)

    f32 = jnp.float32
    params = {"w": jax.ShapeDtypeStruct((64, 32), f32), "b": jax.ShapeDtypeStruct((32,), f32),
              "scale": jax.ShapeDtypeStruct((32,), f32)}
    opt = {"mu": jax.ShapeDtypeStruct((64, 32), f32)}
    path = tmp_path / "step.mlir"
    path.write_text(jax.jit(step).lower(params, opt, jax.ShapeDtypeStruct((8, 64), f32)).as_text(debug_info=True))
    s = analyze(path).summary
    assert s["params"] == 64 * 32 + 32 + 32 and s["param_bytes"] == 4 * s["params"]
    assert s["input_bytes"] == 4 * (64 * 32 + 8 * 64)  # the optimizer state and x


@pytest.fixture(scope="module")
def torch_models(tmp_path_factory):
    """ResNet-18 (timm) and a small GPT-2 (transformers), lowered by `mhlo-cost lower`, with the torch model."""
    import importlib.util

    torch = pytest.importorskip("torch")
    missing = [m for m in ("torchax", "transformers", "timm") if importlib.util.find_spec(m) is None]
    if missing:  # (find_spec: timm is imported through mhlo-cost's own shim, as tests/test_zoo.py does)
        pytest.skip(f"{', '.join(missing)} not installed (pip install 'mhlo-cost[models]')")
    from mhlo_cost.lower.frontends import hub

    tmp = tmp_path_factory.mktemp("params")
    gpt2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64)
    specs = {"resnet18": ("timm", "resnet18", {}, "1x3x64x64"), "gpt2": ("hf", "GPT2LMHeadModel", gpt2, "2x16:int64")}
    out = {}
    for key, (lib, name, sets, shape) in specs.items():
        path = tmp / f"{key}.mlir"
        argv = ["lower", f"--{lib}", name, "--input", shape, "-o", str(path), "-q"]
        for k, v in sets.items():
            argv += ["--set", f"{k}={v}"]
        assert main(argv) == 0, key
        with torch.device("meta"):
            model = hub.build(lib, name, None, sets)
        out[key] = (path, model)
    return out


@pytest.mark.parametrize("key", ["resnet18", "gpt2"])
def test_params_equal_torch(torch_models, key):
    from mhlo_cost import analyze

    path, model = torch_models[key]
    want = sum(p.numel() for p in model.parameters())  # tied weights once, buffers not at all
    a = analyze(path)
    assert a.summary["params"] == want
    if key == "resnet18":
        assert want == 11_689_512
        stats = sum(b.numel() for n, b in model.named_buffers() if "running_" in n)  # batch-norm statistics
        assert a.summary["param_bytes"] == 4 * want  # f32
        assert a.summary["input_bytes"] == 4 * (3 * 64 * 64 + stats)  # the image and the buffers: not parameters


def test_params_per_module_resnet18(torch_models, capsys):
    path, model = torch_models["resnet18"]
    rows = list(csv.DictReader(io.StringIO(_out(capsys, "report", path, "--by", "tree:1", "--format", "csv", "-q"))))
    got = {r["scope"]: int(r["params"]) for r in rows}
    for name in ("conv1", "bn1", "layer1.0", "layer3.1", "fc"):
        mod = model.get_submodule(name)
        assert got[name] == sum(p.numel() for p in mod.parameters()), name


# -- the summary in every format ---------------------------------------------------------------------------------
def _table_metrics(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("---"))
    return [ln.split()[0] for ln in lines[start + 1:] if ln.strip()]


def _html_metrics(page: str) -> list[str]:
    body = page.split('<section id="summary">', 1)[1].split("</section>", 1)[0]
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<tr><td data-v="([^"]*)"', body)]


def test_every_format_has_every_summary_figure(capsys, tmp_path):
    table = _out(capsys, "report", GPT, *H100_FUSED, "-q")
    csv_text = _out(capsys, "report", GPT, *H100_FUSED, "--format", "csv", "-q")
    js = json.loads(_out(capsys, "report", GPT, *H100_FUSED, "--format", "json", "-q"))
    md = _out(capsys, "report", GPT, *H100_FUSED, "--format", "markdown", "-q")
    page = tmp_path / "g.html"
    assert main(["report", str(GPT), *H100_FUSED, "--format", "html", "-o", str(page), "-q"]) == 0
    in_table = _table_metrics(table)
    in_csv = list(_csv_pairs(csv_text))
    in_md = [ln.split("|")[1].strip() for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    in_html = _html_metrics(page.read_text())
    assert in_table == in_csv == list(js["summary"]) == [r["metric"] for r in js["rows"]] == in_md == in_html
    for k in ("peak_bytes_fused", "peak_op", "peak_block", "params", "macs", "est_time_fused_s", "peak_op_fused"):
        assert k in js["summary"], k
    assert js["summary"]["params"] == int(_csv_pairs(csv_text)["params"]) == sum(
        v for k, v in _gpt_params().items() if k != "layer")
    # the headline: first under the title, the same line in JSON and on the page
    assert table.splitlines()[1] == js["headline"] and js["headline"] in page.read_text()
    assert js["headline"] == ("FLOPs 1.90 G (matmul/conv 1.88 G) | MACs 939.52 M | params 3.72 M | "
                              "peak memory 8.48 MB | 279 us on h100-sxm, fused")


def test_chosen_execution_first(capsys):
    names = list(_csv_pairs(_out(capsys, "report", GPT, *H100_FUSED, "--format", "csv", "-q")))
    for fused, plain in (("est_time_fused_s", "est_time_s"), ("peak_bytes_fused", "peak_bytes"),
                         ("utilisation_fused", "utilisation"), ("peak_op_fused", "peak_op")):
        assert names.index(fused) + 1 == names.index(plain), fused
    unfused = list(_csv_pairs(_out(capsys, "report", GPT, "--hardware", "h100", "--format", "csv", "-q")))
    assert not any("_fused" in n for n in unfused)


# -- one figure, one meaning ----------------------------------------------------------------------------------
def test_html_memory_chart_peaks_at_the_summary_peak(capsys, tmp_path):
    s = json.loads(_out(capsys, "report", GPT, *H100_FUSED, "--format", "json", "-q"))["summary"]
    page = tmp_path / "g.html"
    assert main(["report", str(GPT), *H100_FUSED, "--format", "html", "-o", str(page), "-q"]) == 0
    memory = page.read_text().split('<section id="memory">', 1)[1].split("<h3>", 1)[0]
    peaks = [round(float(x) * 1e6) for x in re.findall(r"peak ([\d.]+) MB", memory)]
    assert round(s["peak_bytes"], -3) in peaks and round(s["peak_bytes_fused"], -3) in peaks
    assert max(peaks) == round(s["peak_bytes"], -3)


def test_one_time_unit_per_table(capsys):
    md = _out(capsys, "report", GPT, "--by", "block", *H100_FUSED, "--format", "markdown", "-q")
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines() if ln.startswith("|")]
    heads = lines[0]
    units = {m.group(1) for h in heads for m in [re.fullmatch(r"\w+\[(s|ms|us|ns)\]", h)] if m}
    assert len(units) == 1 and "est_time_fused[ms]" in heads, heads  # est_time and est_time_fused alike
    row = next(r for r in lines[2:] if r[0] == "ln_f")
    for col in ("est_time[ms]", "est_time_fused[ms]"):  # the small block reads, not 0.00
        assert float(row[heads.index(col)]) > 0 and len(row[heads.index(col)].split(".")[1]) >= 3, col


def test_check_counts_its_rows(capsys, tmp_path):
    base = tmp_path / "b.json"
    assert main(["baseline", str(GPT), "-o", str(base), "-q"]) == 0
    doc = json.loads(base.read_text())
    renamed = next(b for b in doc["blocks"] if b["block"] == "layers.3")
    renamed["block"] = "layers.9"  # one block removed (layers.9), another added (layers.3)
    base.write_text(json.dumps(doc))
    assert main(["check", str(GPT), "--baseline", str(base), "--format", "csv", "-q"]) == 1
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    said = int(re.search(r"(\d+) count\(s\) moved", err).group(1))
    assert said == len(rows) and all(int(r["delta"]) != 0 for r in rows)
    nonzero = sum(1 for k, v in renamed.items() if k != "block" and v)
    assert len(rows) == 2 * nonzero


def test_sweep_view_has_digits_for_small_models():
    pd = pytest.importorskip("pandas")
    from mhlo_cost.studies.sweep.table import to_markdown

    df = pd.DataFrame({"model": ["gpt"] * 2, "shape": ["a", "b"], "parallel": ["none"] * 2, "devices": [1, 1],
                       "hardware": ["h100"] * 2, "dtype": ["f32"] * 2, "status": ["ok"] * 2,
                       "time_step_s": [1.586e-4, 3.2e-5], "time_run_s": [1.586e-4, 3.2e-5], "comm_bytes": [0, 0],
                       "comm_time_s": [0.0, 0.0], "comm_exposed_s": [0.0, 0.0], "peak_bytes": [9_664_512, 8_222_728],
                       "fits": ["yes"] * 2, "utilisation": [0.0121, 0.00128], "bound": ["compute"] * 2})
    lines = to_markdown(df).splitlines()
    assert "step us" in lines[0] and "peak MB" in lines[0]
    assert "| 158.60 |" in lines[2] and "| 9.66 |" in lines[2] and "| 0.13 |" in lines[3]


# -- --block, pictures -----------------------------------------------------------------------------------------
def test_block_takes_every_row_of_the_block_table(capsys):
    rows = list(csv.DictReader(io.StringIO(_out(capsys, "report", GPT, "--by", "block", "--format", "csv", "-q"))))
    for name in [r["block"] for r in rows if r["block"] != "TOTAL"]:
        got = list(csv.DictReader(io.StringIO(_out(capsys, "report", GPT, "--by", "block", "--block", name,
                                                    "--format", "csv", "-q"))))
        want = next(r for r in rows if r["block"] == name)
        assert [r["block"] for r in got] == [name] and got[0]["gemm_flops"] == want["gemm_flops"], name
    assert main(["report", str(GPT), "--block", "nope", "-q"]) == 2
    assert "lm_head" in capsys.readouterr().err


def test_memory_picture_scaled_to_the_data(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    out = tmp_path / "m.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to read it back
        assert main(["plot", str(GPT), "--memory", *H100_FUSED, "-o", str(out), "-q"]) == 0
    svg = out.read_text()
    texts = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S)]
    assert any("live bytes per device (MB)" in t for t in texts)  # the peak is 9.66 MB: an MB axis, not GB
    assert any("80 GB, off the scale" in t for t in texts)  # the chip's capacity is named, not drawn
    peaks = [t for t in texts if re.search(r"peak [\d.]+ MB at op \d+", t)]
    assert len(peaks) == 2 and "9.66 MB" in peaks[0] and "8.48 MB" in peaks[1]  # each once, in the legend


def test_html_headers_break_only_at_underscores(tmp_path):
    page = tmp_path / "g.html"
    assert main(["report", str(GPT), *H100_FUSED, "--format", "html", "-o", str(page), "-q"]) == 0
    html = page.read_text()
    names = re.findall(r'<span class="name">(.*?)</span>', html)
    assert names and all(re.fullmatch(r"[^<]*(_<wbr>[^<]*)*", n) for n in names)
    assert all("<wbr>" not in n or n.split("<wbr>")[0].endswith("_") for n in names)
    assert html.count('<table class="data"') == html.count('<div class="scroll"><table class="data"')
    css = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "break-all" not in css  # nothing breaks inside a word


def test_block_table_carries_the_programs_headline(capsys):
    line = json.loads(_out(capsys, "report", GPT, "--format", "json", "-q"))["headline"]
    assert _out(capsys, "report", GPT, "--by", "block", "-q").splitlines()[1] == line
    assert json.loads(_out(capsys, "report", GPT, "--by", "block", "--format", "json", "-q"))["headline"] == line
    assert line == "FLOPs 1.90 G (matmul/conv 1.88 G) | MACs 939.52 M | params 3.72 M | peak memory 9.66 MB"
    # a block's own table has no whole-program headline over it
    assert "MACs" not in _out(capsys, "report", GPT, "--by", "block", "--block", "embed", "-q")

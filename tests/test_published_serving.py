"""The published serving corpus (benchmarks/data/published_serving.toml) is whole: every row names a source of the
file's [sources], its load (a static batch or a concurrency, not both), its lengths and at least one figure; every
row either says how the simulation expresses it or why it cannot; at least 20 rows, TTFT figures among them; and
validate_serving.py turns every expressed row into simulation options without lowering anything."""
from __future__ import annotations

import tomllib
from pathlib import Path
from helpers import script

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "published_serving.toml"
FIGURES = ("output_tok_s", "ttft_ms", "itl_ms", "itl_p50_ms")


def _rows():
    data = tomllib.loads(DATA.read_text())
    return data["sources"], data["row"]


def test_every_row_is_sourced_and_complete():
    sources, rows = _rows()
    assert len(rows) >= 20 and len({r["id"] for r in rows}) == len(rows)
    assert any("ttft_ms" in r for r in rows)
    for r in rows:
        assert r["source"] in sources, r["id"]
        assert ("batch" in r) != ("concurrency" in r), r["id"]
        assert all(isinstance(r[k], int) and r[k] >= 1 for k in ("isl", "osl", "tp")), r["id"]
        assert any(k in r and r[k] > 0 for k in FIGURES), r["id"]
        assert ("express" in r) != ("not_expressed" in r), r["id"]
        if r.get("batched_decode"):  # a per-token latency at a batch of 64 or more
            assert r.get("batch", r.get("concurrency")) >= 64 and ("itl_ms" in r or "itl_p50_ms" in r), r["id"]
    assert any("itl_p50_ms" in r or "itl_ms" in r for r in rows if "express" in r)
    for url in sources.values():
        assert url.startswith("https://")
        if "github.com" in url:  # a repository's file at a commit
            assert "/blob/" in url and len(url.split("/blob/")[1].split("/")[0]) == 40, url


def test_every_expressed_row_makes_simulation_options():
    mod = script("benchmarks/validate_serving.py")
    _, rows = _rows()
    for r in (r for r in rows if "express" in r):
        o = mod.options(r, None, None)
        assert o.tp == r["tp"] and o.launch == r.get("launch", "cuda-graphs")
        assert o.request.precision == r["express"].get("precision")  # an fp8 row is lowered with its recipe
        if r["precision"].startswith("fp8"):
            assert o.request.recipe().name != "bf16", r["id"]
        assert o.allreduce == r.get("allreduce", "vllm")
        for k, v in r.get("server", {}).items():  # the server's knobs as the row gives them
            assert getattr(o.server, k) == v, (r["id"], k)
        if "requests" in r:
            assert o.num_requests == r["requests"] and o.concurrency == r["concurrency"]
        if "batch" in r:
            assert o.num_requests == o.concurrency == r["batch"] == o.server.max_num_seqs
            assert o.server.max_num_batched_tokens >= r["batch"] * r["isl"]

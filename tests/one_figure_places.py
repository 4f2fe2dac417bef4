"""Where each summary figure is shown, read back from the command line (issue 43, item 6: one figure, one answer).

A *place* is one output of ``mhlo-cost`` (``report`` in a format, a ``--by`` view, ``blocks``, ``sweep``, the
HTML page, ``serve``); :data:`READERS` turns the text of each into ``{figure: Shown}``. Figures are named as the
summary JSON names them, plus the figures of the execution the report describes (where ``--fuse elementwise``
adds a ``_fused`` twin, the twin): ``peak``, ``fits``, ``utilisation``, ``comm_exposed`` and ``time``, the step
time the headline, the HTML page, the sweep (``time_step_s``) and ``serve`` (``step_time_s``) each print.

Only the command line is driven (``mhlo_cost.cli.main``), never a module of ``mhlo_cost``: the outputs are what
a user reads.
"""
from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from dataclasses import dataclass

from mhlo_cost.cli import main

COUNTS = ("gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written",
          "comm_bytes", "ops", "comm_ops", "flops", "macs", "params", "param_bytes", "peak_bytes",
          "peak_bytes_fused", "fused_kernels", "fused_bytes")
TIMES = ("est_time_s", "est_time_overlap_s", "est_time_fused_s", "est_time_fused_overlap_s", "comm_time_s")
#: Columns of the block table (and of the grouped views) that hold a summary figure under the same name.
TABLE = COUNTS + TIMES + ("bound", "execution")
#: The ``_fused`` twins that stand for the execution described, where there is one.
CHOSEN = {"peak": "peak_bytes", "fits": "fits", "utilisation": "utilisation"}


@dataclass(frozen=True)
class Shown:
    """A figure as a place shows it: ``tol`` is half a unit of the last digit printed (0: every digit shown)."""

    value: object
    tol: float = 0.0

    def agrees(self, ref: "Shown") -> bool:
        a, b = self.value, ref.value
        if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
            return type(a) is type(b) and a == b  # True is not "yes"
        if isinstance(a, int) and isinstance(b, int) and not self.tol:
            return a == b
        # floats printed in full are equal after rounding to 12 significant digits (sums taken in another order
        # differ in the last bit); printed ones within half a unit of their last digit
        return abs(a - b) <= self.tol + 1e-12 * max(abs(a), abs(b)) + 1e-18


def run(tmp, *argv) -> str:
    """``mhlo-cost ARGV -o FILE -q``: the file's text."""
    out = tmp / f"out{len(list(tmp.iterdir()))}"
    assert main([str(a) for a in argv] + ["-o", str(out), "-q"]) == 0, argv
    return out.read_text()


def number(text: str):
    """A cell written exactly: int, float, or the text."""
    t = text.strip()
    for kind in (int, float):
        try:
            return kind(t.replace(",", "") if kind is int else t)
        except ValueError:
            pass
    return t


_PRINTED = re.compile(r"(-?\d+)(?:\.(\d+))?(?:e([+-]?\d+))?(?: ?(s|ms|us|ns|[PTGMK]B?|B))?")
_SCALE = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "K": 1e3, "": 1}


def printed(text: str) -> Shown:
    """A value as a table or a headline prints it (``1,318``, ``4.10 ms``, ``0.2969``, ``1.21 T``, ``485.68 MB``),
    with the precision it is printed at."""
    t = text.strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})*", t):
        return Shown(int(t.replace(",", "")))
    m = _PRINTED.fullmatch(t)
    if not m:
        return Shown(t)
    whole, frac, exp, unit = m.groups()
    scale = _SCALE[(unit or "").rstrip("B")] if unit != "B" else 1
    ten = 10.0 ** int(exp or 0)
    return Shown(float(f"{whole}.{frac or 0}") * ten * scale, 0.5 * 10.0 ** -len(frac or "") * ten * scale)


def chosen(s: dict) -> dict:
    """The figures of the execution described, from a place's own names: ``x_fused`` where there is one."""
    out = {}
    for fig, name in CHOSEN.items():
        twin = name + "_fused" if name != "fits" else "fits_fused"
        if twin in s or name in s:
            out[fig] = s[twin] if twin in s else s[name]
    return out


def summary_figures(s: dict, wrap=Shown) -> dict:
    """A summary's pairs (JSON, CSV, table, the HTML page) as figures."""
    out = {k: wrap(v) for k, v in s.items() if k in COUNTS + TIMES + ("execution",)}
    out.update({k: wrap(v) for k, v in chosen(s).items()})
    if "comm_time_s" in s:  # the exposure of the execution described: the fused one where fused
        out["comm_exposed"] = wrap(s.get("comm_exposed_fused_s", s["comm_exposed_s"]))
    return out


def reference(s: dict) -> dict:
    """The reference figures, from the summary JSON: its pairs, and the step time and exposure its own
    ``est_time[_fused]_overlap_s`` is made of (compute + exposed communication, what the sweep ranks by)."""
    out = summary_figures(s)
    if "comm_time_s" in s:
        fused = "est_time_fused_s" in s
        step = s["est_time_fused_overlap_s" if fused else "est_time_overlap_s"]
        out["time"] = Shown(step)
        out["comm_exposed"] = Shown(step - (s["est_time_fused_s" if fused else "est_time_s"] - s["comm_time_s"]))
    return out


def total_row(text: str, label: str = None) -> dict:
    """The TOTAL row of a CSV table, exact."""
    rows = list(csv.DictReader(io.StringIO(text)))
    key = label or next(iter(rows[0]))
    return {k: number(v) for k, v in next(r for r in rows if r[key] == "TOTAL").items() if v != ""}


def table_figures(row: dict) -> dict:
    """A block table's (or a grouped view's) TOTAL row as figures."""
    out = {k: Shown(v) for k, v in row.items() if k in TABLE}
    if "comm_exposed_s" in row:
        out["comm_exposed"] = Shown(row.get("comm_exposed_fused_s", row["comm_exposed_s"]))
    if "peak_bytes" in row:
        out["peak"] = Shown(row.get("peak_bytes_fused", row["peak_bytes"]))
    return out


# -- the places -------------------------------------------------------------------------------------------------

def summary_json(text):
    return summary_figures(json.loads(text)["summary"])


def summary_csv(text):
    return summary_figures({r["metric"]: number(r["value"]) for r in csv.DictReader(io.StringIO(text))})


def summary_table(text):
    """The terminal's summary: printed precision (``4.10 ms``, ``0.2969``); counts with every digit."""
    pairs = {}
    for line in text.splitlines()[4:]:
        m = re.match(r"(\S+)\s{2,}(.*\S)", line)
        if m:
            pairs[m.group(1)] = m.group(2)
    return summary_figures(pairs, wrap=printed)


def headline(line: str) -> dict:
    """``FLOPs 1.21 T (matmul/conv 1.20 T) | MACs ... | params ... | peak memory ... | 4.1 ms on H, fused``:
    each at its printed precision (3 significant digits, or hundredths of the prefix)."""
    out = {}
    for part in line.split(" | "):
        for name, pattern in (("flops", r"FLOPs (\S+ ?[PTGMK]?)"), ("macs", r"MACs (\S+ ?[PTGMK]?)"),
                              ("params", r"params (\S+ ?[PTGMK]?)"), ("peak", r"peak memory (\S+ ?[PTGMK]?B)"),
                              ("time", r"^(\S+ (?:s|ms|us|ns)) on ")):
            m = re.search(pattern, part)
            if m:
                out[name] = printed(m.group(1))
    return out


def table_headline(text):
    return headline(text.splitlines()[1])


def by_block(text):
    return table_figures(total_row(text))


def by_comm(text):
    rows = list(csv.DictReader(io.StringIO(text)))
    t = total_row(text, "op")
    return {"comm_bytes": Shown(t["comm_bytes"]), "comm_ops": Shown(t["multiplicity"]),
            "comm_time_s": Shown(t["comm_time_s"]),
            "comm_exposed": Shown(t.get("comm_exposed_fused_s", t["comm_exposed_s"])),
            "ops_listed": Shown(len(rows) - 1)}


def by_group(text):
    t = total_row(text)
    return {k: Shown(v) for k, v in t.items() if k in TABLE}


def by_tree(text):
    root = next(r for r in csv.DictReader(io.StringIO(text)) if r["scope"] == "(all)")
    return {k: Shown(number(v)) for k, v in root.items() if k in COUNTS}


def by_memory(text):
    rows = list(csv.DictReader(io.StringIO(text)))
    out = {"peak_bytes": Shown(max(int(r["during_bytes"]) for r in rows))}
    if "during_bytes_fused" in rows[0]:
        out["peak_bytes_fused"] = Shown(max(int(r["during_bytes_fused"]) for r in rows))
    return out


def by_op(text):
    """The disassembly table: op occurrences (unfused) or fused kernels and the ops no kernel holds
    (collectives, unknown ops); their latencies add up to the time."""
    rows = list(csv.DictReader(io.StringIO(text)))
    fused = rows[0]["execution"] != "unfused"
    n = sum(int(r["multiplicity"]) for r in rows if not fused or r["kind"] == "kernel")
    t = math.fsum(float(r["latency_us"]) for r in rows) * 1e-6  # a row's latency covers its multiplicity
    return {"fused_kernels" if fused else "ops": Shown(n), "est_time_fused_s" if fused else "est_time_s": Shown(t)}


def by_phase(text):
    d = json.loads(text)
    t = next(r for r in d["rows"] if r["phase"] == "TOTAL")
    out = {k: Shown(v) for k, v in t.items() if k in TABLE}
    mem = d["phases"]["memory"]
    out["peak_bytes"], out["param_bytes"] = Shown(mem["peak"]), Shown(mem["parameters"])
    return out


def sweep(text):
    r = json.loads(text)["rows"][0]
    fused = r["execution"] != "unfused"
    out = {k: Shown(v) for k, v in r.items() if k in COUNTS + TIMES + ("bound", "execution")}
    out.update({k: Shown(v) for k, v in chosen(r).items()})
    out["comm_exposed"] = Shown(r["comm_exposed_fused_s" if fused else "comm_exposed_s"])
    out["time"] = Shown(r["time_step_s"])
    return out


def _section(page: str, sid: str) -> str:
    i = page.index(f'id="{sid}"')
    return page[i:page.find("</section>", i)]


def html_summary(page):
    part = _section(page, "summary")
    pairs = dict(re.findall(r'<tr><td data-v="([^"]*)">[^<]*</td><td data-v="([^"]*)"', part))
    return summary_figures({k: number(html.unescape(v)) for k, v in pairs.items()})


def html_headline(page):
    return headline(html.unescape(re.search(r'<b class="headline">(.*?)</b>', page).group(1)))


def html_cards(page):
    """The cards' exact values (their hover titles)."""
    names = {"vector FLOPs": "vector_flops", "transcendentals": "transcendentals", "param bytes": "param_bytes",
             "communication per device": "comm_bytes", "peak bytes": "peak_bytes", "params": "params",
             "fused peak bytes": "peak_bytes_fused", "utilisation of the matrix peak": "utilisation"}
    out = {}
    for title, key in re.findall(r'<div class="card" title="([^"]*)"><div class="v">[^<]*</div>'
                                 r'<div class="k">([^<]*)</div>', page):
        key = html.unescape(key)
        value = number(html.unescape(title).split(" ")[0])
        if key.startswith("estimated time"):
            out["time"] = Shown(value)
        elif key.startswith("ops"):
            out["ops"] = Shown(value)
        elif key in names:
            out[names[key]] = Shown(value)
    return out


def html_blocks(page):
    """The block table's TOTAL row on the page: the exact values (``data-v``)."""
    part = _section(page, "block-table")
    cols = re.findall(r'<th data-col="\d+"[^>]*title="sort by ([^"]*)"', part)
    row = re.search(r'<tr class="total">(.*?)</tr>', part, re.S).group(1)
    cells = [html.unescape(v) for v in re.findall(r'<td[^>]*data-v="([^"]*)"', row)]
    return table_figures({c: number(v) for c, v in zip(cols, cells) if v != ""})


def serve_json(text):
    """``serve --format json``: its figures under the report's names."""
    s = json.loads(text)["summary"]
    names = {"flops": "flops", "bytes_moved": "fused_bytes", "step_time_s": "time", "weight_bytes": "param_bytes",
             "memory_bytes": "peak", "fits": "fits", "bound": "bound", "comm_time_s": "comm_time_s",
             "TOTAL.est_time_s": "est_time_fused_s", "execution": "execution"}
    return {fig: Shown(s[k]) for k, fig in names.items() if k in s}


def serve_table(text):
    pairs = {}
    for line in text.splitlines():
        m = re.match(r"\s+(\S+)\s{2,}(.*\S)", line)
        if m:
            pairs[m.group(1)] = m.group(2)
    names = {"flops": "flops", "bytes_moved": "fused_bytes", "step_time_s": "time", "weight_bytes": "param_bytes",
             "memory_bytes": "peak", "fits": "fits", "bound": "bound"}
    return {fig: printed(pairs[k]) for k, fig in names.items() if k in pairs}

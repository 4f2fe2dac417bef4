"""The torch eager norm rows of the published corpus (``impl = "torch"``, category ``memory_eager`` in
``validate_published.py``), one line each: the kernels the row's torch launches for its call
(:mod:`mhlo_cost.roofline.torch_norms`: ``F.rms_norm`` fused where the row's ``torch_version`` names the fused path,
``F.layer_norm`` in any torch 2), the bytes they move once, measured and predicted time, and the ratio."""
from __future__ import annotations

import held_out

from mhlo_cost.roofline.torch_norms import layer_norm_kernels, rms_norm_kernels

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def torch_kernels(m: dict) -> list | None:
    """The kernels of row ``m``'s torch call, or None where its torch version is not known to choose them."""
    p = m["params"]
    size = ITEMSIZE[p["dtype"]]
    if m["program"] == "layer_norm":
        return layer_norm_kernels(p["rows"], p["cols"], size)
    version = m.get("torch_version", "")
    if "_fused_rms_norm" not in version:
        return None
    return rms_norm_kernels(p["rows"], p["cols"], size)


def table_lines(results, measured_s) -> list[str]:
    """Every torch eager norm row of ``results`` ((row, ratio, held out)), by source."""
    out = ["every torch eager norm row (memory_eager), by source (ratio = estimate / measured):",
           f"  {'source':24} {'chip':5} {'program':10} {'rows x cols':>13} {'dtype':8} {'kernels':28} "
           f"{'once MB':>8} {'measured':>10} {'predicted':>10} {'ratio':>6}"]
    mine = [(m, r) for m, r, _ in results if m.get("impl") == "torch"]
    for m, r in sorted(mine, key=lambda x: (held_out.source_of(x[0]), x[0]["chip"], x[0]["id"])):
        p, meas = m["params"], measured_s(m) * 1e3
        ks = torch_kernels(m)
        names = "?" if ks is None else "+".join(k.name.replace("_kernel", "") for k in ks)
        once = "?" if ks is None else f"{sum(k.bytes_read + k.bytes_written for k in ks) / 1e6:8.1f}"
        out.append(f"  {held_out.source_of(m)[:24]:24} {m['chip']:5} {m['program']:10} "
                   f"{p['rows']:>6}x{p['cols']:<6} {p['dtype']:8} {names[:28]:28} {once:>8} "
                   f"{meas:8.4f}ms {r * meas:8.4f}ms {r:6.2f}")
    return out

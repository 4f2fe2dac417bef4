"""The estimate of a program on one hardware profile: totals, the disassembly table, blocks."""
from __future__ import annotations

import math
import os
from operator import attrgetter
from typing import TYPE_CHECKING

from ..machines.execution import EXECUTIONS, execution_of  # noqa: F401 (the estimate's names too)
from ..machines.hardware import Hardware
from ..network import CollectiveEstimate, Exposure, exposed_comm, resolve_profile, row_estimate
from ..ir.tensorinfo import TensorInfo
from ..walk.row import Row, short_name
from .block_frame import block_extra, block_frame
from .bounds import span_bound
from .fusion import FUSE_MODES
from .inductor_launch import parse_torch
from .optime import op_time, unit_peaks
from .program import ProgramPricing, fuse

if TYPE_CHECKING:  # (pandas imported where a frame is made: a sweep's worker prices programs and makes none)
    import pandas as pd

_COMM, _COMPUTE, _MEMORY, _OVERHEAD = (attrgetter(f"{x}_s") for x in ("comm", "compute", "memory", "overhead"))
_FIXED_OF, _GROWING_OF, _KERNEL = attrgetter("fixed_cost_s"), attrgetter("growing_s"), attrgetter("kernel_s")


class Roofline:
    """Per-op times of an analysis on one hardware profile, and the views built from them."""

    def __init__(self, analysis, hw: Hardware, fuse_mode: str = "none", attention: str | None = None,
                 execution: str | None = None, sdpa: str = "auto", written: str = "auto", cudagraphs: bool = False,
                 torch_version: str | None = None, split_phases: bool = False):
        """``execution`` (:data:`EXECUTIONS`; default: the one ``fuse_mode`` maps onto): ``compiled`` groups
        rows into fused kernels (:func:`.program.fuse`), ``eager`` into one kernel per framework op
        (:func:`.eager.eager`, SDPA calls on the backend ``sdpa``; attention written out op by op as written or,
        ``written="sdpa"``, as an SDPA call); either is :attr:`fusion` and the
        ``_fused`` columns; ``inductor``: as torch.compile's Inductor (:func:`.inductor.inductor`, replayed from a
        CUDA graph with ``cudagraphs``), with the compile gain over eager (:mod:`.gain`). ``attention`` (compiled,
        inductor): ``fused`` (the default) prices each attention as one kernel
        (:mod:`.attention`); ``unfused`` as the separate kernels of its ops. ``torch_version`` (inductor): the
        torch release whose Inductor is modelled (None: a current one). ``split_phases`` (compiled): a training
        step as PyTorch autograd runs it, no fused kernel spanning its phases (:func:`.program.phases_of`)."""
        if fuse_mode not in FUSE_MODES:
            raise ValueError(f"unknown fuse mode {fuse_mode!r}: choose one of {', '.join(FUSE_MODES)}")
        self.analysis = analysis
        self.hw = hw
        self.execution = execution_of(fuse_mode, execution)
        parse_torch(torch_version)  # a version that is not major.minor[.patch] is refused whatever the execution
        self.times = [op_time(r, hw) for r in analysis.rows]
        self.attention = attention or ("fused" if self.execution in ("compiled", "inductor") else "unfused")
        self.sdpa, self.written = sdpa, written
        if self.execution == "compiled":
            self.fusion = fuse(analysis, hw, self.times, attention=self.attention, split_phases=split_phases)
        elif self.execution == "eager":
            from .eager import eager

            self.fusion = eager(analysis, hw, self.times, sdpa=sdpa, written=written)
        elif self.execution == "inductor":
            from .inductor import inductor

            self.fusion = inductor(analysis, hw, self.times, attention=self.attention, cudagraphs=cudagraphs,
                                    sdpa=sdpa, torch_version=torch_version)
            from .gain import CompileGain

            self.gain = CompileGain(self)
        else:
            self.fusion = None
        self._exposure: dict = {}
        self._exposed: dict = {}
        self._totals: dict | None = None
        self._kernel: list | None = None

    @classmethod
    def priced(cls, analysis, hw: Hardware, times: list, fusion, execution: str, attention: str) -> "Roofline":
        """The estimate of ``analysis`` with its rows' ``times`` and ``fusion`` already made (a program priced
        from a layer priced once: :mod:`mhlo_cost.studies.layerprice`)."""
        if execution == "inductor":
            raise ValueError("priced(): the inductor estimate is made from its program (its compile gain)")
        rf = cls.__new__(cls)
        rf.analysis, rf.hw, rf.execution, rf.times, rf.fusion = analysis, hw, execution, times, fusion
        # No caller has another sdpa/written to pass: only the eager and Inductor estimates read them (inductor is
        # refused above), the one caller (layerprice) prices sweep points of fuse none/elementwise
        # (sweep.point.REPEATED_FUSE), the sweep has no SDPA setting and ``report --sdpa`` builds Roofline(...).
        rf.attention, rf.sdpa, rf.written = attention, "auto", "auto"
        rf._exposure, rf._exposed, rf._totals, rf._kernel = {}, {}, None, None
        return rf

    # -- communication: algorithm and tier per collective, and what compute cannot hide ---------------------
    def comm_detail(self, i: int):
        """:class:`~mhlo_cost.network.CollectiveEstimate` of one execution of collective row ``i`` (a chip
        profile: its flat ring over the chip's link)."""
        topology = getattr(self.hw, "topology", None)
        r = self.analysis.rows[i]
        if topology is not None:
            return row_estimate(topology, r)
        t = self.times[i].comm_s / max(r.multiplicity, 1)
        return CollectiveEstimate(t, "ring" if r.group_size > 1 else "none", "link" if r.group_size > 1 else "local")

    def exposure(self, fused: bool = False) -> Exposure:
        """Exposed communication per row (:func:`mhlo_cost.network.exposed_comm`) with the unfused (or
        fused) compute times. Without the data flow (a plain ``analyze``) nothing is taken as hidden."""
        key = bool(fused)
        if key not in self._exposure:
            ts, rows = self.times, self.analysis.rows
            compute = list(self.fusion.row_time) if fused else list(self.kernel_times())
            comm = list(map(_COMM, ts))
            producers = self.analysis.producers
            if not producers:
                producers = [(None,)] * len(rows)  # every op waits for everything before it
                self._exposure[key] = exposed_comm(producers, compute, comm, [r.kind == "collective" for r in rows],
                                                   self.analysis.async_done)
            else:  # the program's graph, made once whatever the chip
                shared = ProgramPricing.of(self.analysis)
                self._exposure[key] = exposed_comm(producers, compute, comm, shared.is_comm(),
                                                   self.analysis.async_done, graph=shared.graph())
        return self._exposure[key]

    def comm_exposed(self, fused: bool = False) -> float:
        """The program's exposed communication (seconds) with the unfused (or ``fused``) compute times: the
        one figure the summary (``comm_exposed_s``, ``comm_exposed_fused_s``), the block table's TOTAL, the
        step times and the sweep read."""
        key = bool(fused)
        if key not in self._exposed:
            self._exposed[key] = math.fsum(self.exposure(fused).exposed)
        return self._exposed[key]

    # -- totals -----------------------------------------------------------------------------------------
    @property
    def unknown_ops(self) -> int:
        return sum(r.multiplicity for r, t in zip(self.analysis.rows, self.times) if t.bound == "unknown")

    def totals(self) -> dict:
        """The program's totals (a fresh dict each call; computed once: the times and kernels never change)."""
        if self._totals is None:
            self._totals = self._sum_totals()
        return dict(self._totals)

    def kernel_times(self) -> list:
        """Per row, :attr:`~.optime.OpTime.kernel_s`, listed once (the totals and the schedule each read it)."""
        if self._kernel is None:
            self._kernel = list(map(_KERNEL, self.times))
        return self._kernel

    def _sum_totals(self) -> dict:
        ts, ks = self.times, self.kernel_times()
        kernel = math.fsum(ks)
        comm = math.fsum(map(_COMM, ts))  # (``map`` of an attrgetter: the same terms in the same order, in C)
        out = {
            "est_compute_s": math.fsum(map(_COMPUTE, ts)),
            "est_memory_s": math.fsum(map(_MEMORY, ts)),
            "est_overhead_s": math.fsum(map(_OVERHEAD, ts)),
            "comm_time_s": comm,
            "comm_exposed_s": self.comm_exposed(),
            "est_time_s": kernel + comm,
        }
        out["est_time_overlap_s"] = kernel + out["comm_exposed_s"]
        for b in ("compute", "memory"):
            out[f"{b}_bound_s"] = math.fsum(k for k, t in zip(ks, ts) if t.bound == b)
            out[f"{b}_bound_ops"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.bound == b)
        out["kernels"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.overhead_s > 0)
        out["free_ops"] = sum(r.multiplicity for r, t in zip(self.analysis.rows, ts) if t.bound == "free")
        out["unknown_ops"] = self.unknown_ops
        if self.fusion is not None:
            f = self.fusion
            out["est_time_fused_s"] = f.time_s + comm
            # what the fused kernels cannot hide (unfused, each broadcast is a kernel a collective can hide under)
            out["comm_exposed_fused_s"] = self.comm_exposed(fused=True)
            out["est_time_fused_overlap_s"] = f.time_s + out["comm_exposed_fused_s"]
            out["fused_kernels"] = sum(k.multiplicity for k in f.kernels)
            out["attention_kernels"] = sum(k.multiplicity for k in f.kernels if k.attention)
            out["fused_bytes"] = sum(k.bytes_read + k.bytes_written for k in f.kernels)
        if self.execution == "inductor":
            out.update(self.gain.totals(out["est_time_fused_overlap_s"]))
        return out

    @property
    def flops(self) -> int:
        return sum(r.gemm_flops + r.conv_flops + r.vector_flops for r in self.analysis.rows)

    @property
    def reference_peak(self) -> float:
        return unit_peaks(self.analysis.rows, self.times) or self.hw.vector_peak("f32")

    @property
    def step_name(self) -> str:
        """The summary figure that is one step of the execution described: compute plus the communication it
        cannot hide, ``est_time_fused_overlap_s`` where the estimate fuses (or is eager), else
        ``est_time_overlap_s``. The headline, the page's cards, utilisation, the run's time and the sweep's
        ``time_step_s`` all read it."""
        return "est_time_fused_overlap_s" if self.fusion is not None else "est_time_overlap_s"

    def summary(self, steps: int = 1) -> dict:
        """Totals for one forward, and for ``steps`` of them (a run), with achieved utilisation:
        all FLOPs / (step x the matrix peak of the dtype that carries most GEMM FLOPs); the step of each
        execution is its compute plus the communication it cannot hide (``est_time[_fused]_overlap_s``)."""
        tot = self.totals()
        peak = self.reference_peak
        flops = self.flops
        out = {"hardware": self.hw.name, "execution": self.execution, "reference_peak_tflops": peak / 1e12,
               "flops": flops}
        out.update(tot)
        twins = ("", "_fused") if self.fusion is not None else ("",)
        for sfx in twins:
            t = tot[f"est_time{sfx}_overlap_s"]
            out[f"utilisation{sfx}"] = flops / (t * peak) if t > 0 else 0.0
        out["steps"] = steps
        for sfx in twins:
            out[f"run_time{sfx}_s"] = tot[f"est_time{sfx}_overlap_s"] * steps
        out["run_flops"] = flops * steps
        if getattr(self.fusion, "sdpa_note", ""):
            out["sdpa"] = self.fusion.sdpa_note
        notes = self.precision_notes()
        if notes:
            out["precision_note"] = "; ".join(notes)
        return out

    def precision_notes(self) -> list[str]:
        """One line per low precision the program's dots run in that the chip has no matrix rate for (priced
        upcast: :func:`mhlo_cost.machines.precision.upcast_note`); none for a program in classical dtypes."""
        from ..analysis import precision_flops
        from ..machines.precision import upcast_note

        notes = [upcast_note(self.hw, k.rsplit("_", 1)[1]) for k in precision_flops(self.analysis.rows)]
        return [n for n in notes if n]

    # -- the disassembly table -----------------------------------------------------------------------
    def op_frame(self, top: int | None = None) -> pd.DataFrame:
        """One row per op occurrence, program order (``top``: the N slowest, slowest first)."""
        rows, ts = self.analysis.rows, self.times
        order = list(range(len(rows)))
        if top is not None:
            order = sorted(order, key=lambda i: (-ts[i].time_s, i))[:top]
        data = {
            "index": [rows[i].index for i in order],
            "operation": [_operation(rows[i]) for i in order],
            "kind": [rows[i].kind for i in order],
            "inputs": [" ".join(t.pretty for j, t in enumerate(rows[i].operands) if j not in rows[i].weights)
                       for i in order],
            "weights": [" ".join(rows[i].operands[j].pretty for j in rows[i].weights) for i in order],
            "output": [_pretty(rows[i].result) for i in order],
            "multiplicity": [rows[i].multiplicity for i in order],
            "gflops": [ts[i].flops / 1e9 if ts[i].unit != "transcendental" else
                       (rows[i].vector_flops / 1e9) for i in order],
            "latency_us": [ts[i].time_s * 1e6 for i in order],
            "utilisation": [ts[i].utilisation for i in order],
            "bound": [ts[i].bound for i in order],
            "execution": ["unfused"] * len(order),  # each op its own kernel, whatever --execution says
        }
        import pandas as pd

        df = pd.DataFrame(data)
        df["multiplicity"] = df["multiplicity"].astype("int64")
        df["index"] = df["index"].astype("int64")
        return df

    def kernel_frame(self, top: int | None = None) -> pd.DataFrame:
        """One row per fused kernel (``--fuse``), and one per collective and per unknown op (no kernel holds
        them: a collective's time is its communication), in program order of their heads (``top``: the N
        slowest, slowest first): their latencies add up to ``est_time_fused_s``. ``kind``: ``kernel``, or
        the op's kind."""
        if self.fusion is None:
            raise ValueError("kernel_frame() needs fuse_mode='elementwise'")
        rows, ts, rk = self.analysis.rows, self.times, self.fusion.row_kernel
        alone = [i for i, r in enumerate(rows) if rk[i] is None and r.kind in ("collective", "unknown")]
        items = [(k.head, k.time_s, self._kernel_cells(k)) for k in self.fusion.kernels]
        items += [(i, ts[i].time_s, self._alone_cells(i)) for i in alone]
        items.sort(key=lambda it: it[0])
        if top is not None:
            items = sorted(items, key=lambda it: (-it[1], it[0]))[:top]
        cells = [c for _, _, c in items]
        import pandas as pd

        df = pd.DataFrame({name: [c[name] for c in cells] for name in _KERNEL_COLUMNS})
        for c in ("index", "multiplicity"):
            df[c] = df[c].astype("int64")
        df["execution"] = self.execution
        return df

    def _kernel_cells(self, k) -> dict:
        """The kernel table's cells of one fused kernel."""
        rows = self.analysis.rows
        weights = [rows[i].operands[j].pretty for i in k.members for j in rows[i].weights]
        return {"index": rows[k.head].index, "operation": _kernel_name(rows[k.head], k), "kind": "kernel",
                "ops": " ".join(short_name(rows[i].op) for i in k.members),
                "inputs": " ".join(t.pretty for t in k.inputs), "weights": " ".join(weights),
                "output": " ".join(t.pretty for t in k.outputs), "multiplicity": k.multiplicity,
                "gflops": k.flops / 1e9, "latency_us": k.time_s * 1e6, "utilisation": k.utilisation,
                "bound": k.bound}

    def _alone_cells(self, i: int) -> dict:
        """The kernel table's cells of an op no kernel holds (a collective, an unknown op), as op_frame has it."""
        r, t = self.analysis.rows[i], self.times[i]
        return {"index": r.index, "operation": _operation(r), "kind": r.kind, "ops": short_name(r.op),
                "inputs": " ".join(x.pretty for j, x in enumerate(r.operands) if j not in r.weights),
                "weights": " ".join(r.operands[j].pretty for j in r.weights), "output": _pretty(r.result),
                "multiplicity": r.multiplicity, "gflops": t.flops / 1e9, "latency_us": t.time_s * 1e6,
                "utilisation": t.utilisation, "bound": t.bound}

    # -- blocks (:mod:`.block_frame`) ------------------------------------------------------------------
    def block_extra(self) -> dict:
        """Per-row columns for :func:`mhlo_cost.analysis.blocks.block_table` (:func:`.block_frame.block_extra`)."""
        return block_extra(self)

    def program_bound(self) -> str:
        """The whole program's bound by :func:`span_bound`, the block table's rule (its TOTAL row): the
        summary's times, the compute-bound kernels' time and the fixed and growing costs of every op."""
        tot, ts, fused = self.totals(), self.times, self.fusion is not None
        if fused:
            ks, rk, ft = self.fusion.kernels, self.fusion.row_kernel, self.fusion.row_time
            bound = [k.bound == "compute" for k in ks]  # (per kernel once, not per member row)
            compute = math.fsum(f for f, j in zip(ft, rk) if j is not None and bound[j])
        else:
            compute = tot["compute_bound_s"]
        comm = tot["comm_time_s"]
        return span_bound(tot["est_time_fused_s" if fused else "est_time_s"] - comm, compute, comm,
                          math.fsum(map(_FIXED_OF, ts)), math.fsum(map(_GROWING_OF, ts)))

    def block_frame(self, blocks, parts: bool = False, memory: list | None = None) -> pd.DataFrame:
        """The block table with the estimate columns (:func:`.block_frame.block_frame`)."""
        return block_frame(self, blocks, parts, memory)


#: Columns of the fused kernel table (:meth:`Roofline.kernel_frame`), ``execution`` last.
_KERNEL_COLUMNS = ("index", "operation", "kind", "ops", "inputs", "weights", "output", "multiplicity", "gflops",
                   "latency_us", "utilisation", "bound")
def _operation(r: Row) -> str:
    name = short_name(r.op)
    if r.target and name == "custom_call":
        name = f"custom_call({r.target})"
    return f"{r.scope}/{name}" if r.scope else name


def _kernel_name(head: Row, k) -> str:
    """The head op's name (``attention`` for a fused attention kernel) and how many more ops it holds."""
    name = _operation(head)
    if k.attention:
        name = f"{head.scope}/attention" if head.scope else "attention"
    return name + (f" +{len(k.members) - 1}" if len(k.members) > 1 else "")


def _pretty(res) -> str:
    if isinstance(res, TensorInfo):
        return res.pretty
    return " ".join(t.pretty for t in res)


def hardware_from_args(name: str | None, path: str | os.PathLike | None) -> Hardware | None:
    """The chip or system named ``name`` (in the user's TOML ``path`` first); the file's only system (or
    chip) where no name is given; None where neither is."""
    return resolve_profile(name, path)

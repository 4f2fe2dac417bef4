"""Views of a memory profile: the fused estimate, the live-bytes timeline (``report --by memory``), the
summary lines (where the peak is, whether it fits the chip) and the block columns."""
from __future__ import annotations

from ..analysis.series import int_series
from ..machines.execution import memory_suffix
from ..memory.profile import MemoryProfile, profile

#: The profile whose fusion groups the rows when --fuse is given without --hardware. The grouping reads no
#: rate of the profile (only which ops need no kernel), so any profile gives the same kernels.
GROUPING_PROFILE = "h100"


def fused_profile(analysis, fusion=None, attention: str = "unfused") -> MemoryProfile:
    """The fused estimate of ``analysis`` (made with ``AnalysisOptions(dataflow=True)``): values made
    and used inside one kernel of ``fusion`` (by default :func:`mhlo_cost.roofline.fuse`'s, with ``attention``
    ``fused``: each attention one flash-attention kernel, whose scores are never stored) never stored."""
    if fusion is None:
        from ..machines.hardware import get_profile
        from . import fuse

        fusion = fuse(analysis, get_profile(GROUPING_PROFILE), attention=attention)
    if analysis.producers is not None:  # the program's (one per grouping, whatever the chip)
        from .program import ProgramPricing

        return ProgramPricing.of(analysis).fused_memory(analysis, fusion.row_kernel)
    return profile(analysis, fusion.row_kernel)


def eager_profile(analysis, fusion=None, sdpa: str = "auto") -> MemoryProfile:
    """The eager estimate of ``analysis`` (PyTorch eager, :func:`mhlo_cost.roofline.eager.eager`): a value made
    and used inside one framework call is never stored (the scores of an SDPA call on a flash, cuDNN or
    memory-efficient kernel; an attention written out stores them), views (broadcast, transpose, slice,
    reshape) share their operand's storage, and a value is freed after its last use or once its last Python
    reference dies, where the call stacks show one (:mod:`.eager_hold`)."""
    if fusion is None:
        from ..machines.hardware import get_profile
        from .eager import eager

        fusion = eager(analysis, get_profile(GROUPING_PROFILE), sdpa=sdpa)
    return profile(analysis, fusion.row_kernel, eager=True)


def profiles(analysis, fused: MemoryProfile | None) -> list[tuple[str, MemoryProfile]]:
    """(column suffix, profile) pairs: the unfused one, and the execution model's where there is one (its suffix
    :func:`~mhlo_cost.machines.execution.memory_suffix`: ``_fused`` for compiled, ``_eager`` for eager)."""
    out = [("", analysis.memory)]
    if fused is not None:
        out.append((memory_suffix(fused.execution), fused))
    return out


def timeline_frame(analysis, blocks, fused: MemoryProfile | None = None) -> pd.DataFrame:
    """One row per op in program order: its block, scope and op, the live bytes while it runs and after it
    (``live_bytes``), the same for the fused estimate, and ``peak`` marking where the highest total is."""
    import pandas as pd  # here: the summary (summary_lines) needs no pandas

    rows, mem = analysis.rows, analysis.memory
    data = {
        "index": int_series([r.index for r in rows]),
        "block": block_labels(analysis, blocks),
        "scope": [r.scope for r in rows],
        "op": [r.op.split(".", 1)[-1] for r in rows],
        "shape": [r.shape for r in rows],
        "during_bytes": int_series(mem.during),
        "live_bytes": int_series(mem.after),
    }
    marks = [""] * len(rows)
    if mem.peak_row is not None:
        marks[mem.peak_row] = "peak"
    if fused is not None:
        sfx = memory_suffix(fused.execution)
        data["during_bytes" + sfx] = int_series(fused.during)
        data["live_bytes" + sfx] = int_series(fused.after)
        if fused.peak_row is not None:
            mark = f"peak ({sfx[1:]})"
            marks[fused.peak_row] = mark if not marks[fused.peak_row] else "peak, " + mark
    data["peak"] = marks
    return pd.DataFrame(data)


def block_labels(analysis, blocks) -> list[str]:
    """The block of every row (the first, for a loop body shared by several), else its group's name."""
    names = [b.name for b in blocks.blocks]
    return [names[ids[0]] if ids else (g or "(top)") for ids, g in zip(blocks.row_blocks, blocks.row_groups)]


def summary_lines(analysis, blocks, fused: MemoryProfile | None = None, hw=None) -> list[tuple[str, object]]:
    """(metric, value) lines for the summary: the execution model's figures (named by its suffix,
    :func:`~mhlo_cost.machines.execution.memory_suffix`: ``peak_bytes_eager``), where each peak is, and with a hardware
    profile whether the peak fits its HBM (``hbm_bytes``) and by what margin (bytes; negative: short)."""
    lines: list[tuple[str, object]] = []
    if fused is not None:
        if hw is None:  # with a profile, the estimate's lines say it
            lines.append(("execution", fused.execution))
        lines += list(fused.summary(memory_suffix(fused.execution)).items())[:1]
    for suffix, prof in profiles(analysis, fused):
        lines += _where(analysis, blocks, prof, suffix)
    if hw is not None:
        hbm = int(hw.hbm_capacity)
        lines.append(("hbm_bytes", hbm))
        for suffix, prof in profiles(analysis, fused):
            margin = hbm - prof.peak_bytes
            lines.append(("fits" + suffix, "yes" if margin >= 0 else "no"))
            lines.append(("margin_bytes" + suffix, margin))
    return lines


def _where(analysis, blocks, prof: MemoryProfile, suffix: str) -> list[tuple[str, object]]:
    i = prof.peak_row
    if i is None:
        return [("peak_op" + suffix, "(arguments, before the first op)")]
    r = analysis.rows[i]
    block = block_labels(analysis, blocks)[i] if blocks is not None else ""
    return [("peak_op" + suffix, f"{r.op.split('.', 1)[-1]} (row {r.index})"), ("peak_scope" + suffix, r.scope),
            ("peak_block" + suffix, block)]

"""The cost of any step a continuous-batching server runs, from a few lowerings of the decode step.

A server's step is one forward of ``N`` query tokens from several sequences: decodes (one token against a
context of ``p`` cached positions) and prefill chunks (``n`` tokens after ``p`` already computed). The decode
step lowered at a batch ``b`` and a static context ``c`` (:mod:`mhlo_cost.lower.inference`) is such a forward
with ``b`` one-token sequences, and its fused kernels' FLOPs and bytes are polynomials in ``(b, c)`` (degree one in
each: weights once, activations per token, attention per token and cached position). :class:`StepModel` fits
every kernel's FLOPs and bytes exactly (:func:`mhlo_cost.walk.polyfit.fit_grid`) on a 2 x 2 grid of lowerings and
checks the fit, exactly, on a fifth lowering it did not use; a fit that misses is refused.

How a step's composition enters the fitted monomials (per kernel, FLOPs and bytes apart):

- ``1`` (weights, per-step constants): once per step;
- ``b`` (per token: GEMM rows, norms, activations): ``N``, the step's query tokens;
- ``b*c`` (attention's per-sequence context term): the sum over sequences. FLOPs: every query token scores
  every key before it, ``n*p + n*(n+1)/2`` per sequence (``p + 1`` for a decode); bytes: a sequence's keys and
  values are read once for its chunk (a fused attention kernel), ``p + n`` per sequence.
- ``c`` alone (a per-step term sized by the static cache, e.g. a mask row): the step's longest context.

The decode lowering attends over its whole static cache (positions after ``pos`` masked), so it cannot be
lowered at mixed contexts; the per-sequence split above is the assumption, stated.

Pricing is the roofline's (:func:`mhlo_cost.studies.serve.serve.step_study`, compiled): at each lowered batch
(at the largest context; :data:`RATE_BATCHES` adds a larger one, so that a prefill chunk's GEMMs are priced at
the efficiency of many rows) every kernel's compute time, memory time and launch overhead are read, giving the
kernel's own rates: FLOPs/s (the dtype's peak and the GEMM efficiency at that shape in it) and, the profile's
memory time being affine in the bytes (:meth:`mhlo_cost.machines.profile.Hardware.memory_time`: a fill and
drain per kernel plus the bytes at the path's rate), a fixed part and bytes/s. A step's kernel costs
``max(flops / flop rate, fixed + bytes / byte rate) + overhead``, as :class:`mhlo_cost.roofline.fusion.Kernel`
prices it, at the rates of the lowered batch nearest the step's tokens (log scale); the step is the sum. At a
lowered node this is the roofline's time (less its cap at the unfused ops' time, which a fused kernel rarely
meets).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

#: Decode-step grid (batch, context) the fit lowers, and the point it checks on.
BATCHES = (8, 32)
CONTEXTS = (256, 1024)
CHECK = (16, 512)
#: Larger batches lowered (at the largest context) for their kernels' rates only: a step of many tokens (a
#: prefill chunk) runs its GEMMs at the efficiency of that many rows; each is a second check of the fit.
RATE_BATCHES = (256,)


#: What a kernel is, for a step's breakdown (:meth:`StepModel.parts`): a fused attention kernel, a kernel with a
#: matrix product (GEMM), anything else (norms, activations, casts, the cache update).
KINDS = ("gemm", "attention", "other")


class FitError(ValueError):
    """The kernels' counts are not the polynomials the model assumes (the check point misses)."""


@dataclass
class Kernels:
    """One lowered step's fused kernels: FLOPs, bytes moved, compute / memory / overhead seconds."""

    flops: list
    bytes: list
    compute_s: list
    memory_s: list
    overhead_s: list
    fixed_s: list  # the part of memory_s that does not grow with the bytes
    kinds: tuple = ()  # each kernel's kind (:data:`KINDS`; empty: every kernel "other")
    place: list | None = None  # per kernel: its blocks' ids (a layer's, in order), or "pre" / "post" (:func:`placement`)

    @classmethod
    def of(cls, study) -> "Kernels":
        hw = study.roofline.hw
        ks = study.roofline.fusion.kernels
        moved = [int(k.bytes_read + k.bytes_written) for k in ks]
        return cls([int(k.flops) for k in ks], moved, [k.compute_s for k in ks], [k.memory_s for k in ks],
                   [k.overhead_s for k in ks],
                   [hw.memory_fixed(k.multiplicity) if b else 0.0 for k, b in zip(ks, moved)],
                   place=placement(study.blocks, [k.head for k in ks]),
                   kinds=tuple("attention" if k.attention else "gemm" if k.has_dot else "other" for k in ks))

    def counts(self) -> list:
        return self.flops + self.bytes

    @property
    def time_s(self) -> float:
        return float(sum(max(c, m) + o for c, m, o in zip(self.compute_s, self.memory_s, self.overhead_s)))


def placement(blocks, heads: list) -> tuple[list, int]:
    """Where each kernel (its head row in ``heads``) sits among the program's blocks (``blocks``: the study's
    :class:`~mhlo_cost.analysis.collectors.Blocks`): the tuple of its block ids (a loop body's kernel: every
    iteration's), or ``"pre"`` / ``"post"`` for a kernel outside every block before / after the first block's
    first row (the embedding; the final norm and the LM head); and the number of blocks. A pipeline stage runs
    the kernels of its layers (:mod:`.pools`)."""
    rows = blocks.row_blocks
    first = next((i for i, ids in enumerate(rows) if ids), len(rows))
    return [tuple(rows[h]) if rows[h] else ("pre" if h < first else "post") for h in heads], blocks.count


def _rate(work: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """work / seconds per kernel; inf where it takes no time (so that it costs none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = work / seconds
    return np.where(seconds > 0, r, np.inf)


class Rates:
    """One lowered node's per-kernel prices (see the module), applied to the fitted coefficients: ``flop_s``
    and ``byte_s`` (4 x kernels): the seconds of each monomial's count (1, b, c, b*c) at the kernel's rates;
    ``kinds``: each kernel's kind (:data:`KINDS`); ``cache_share``: the part of a fused attention kernel's
    per-sequence context bytes that is the KV cache (the rest: a mask row per position the lowering carries)."""

    def __init__(self, node: Kernels, flops: list, moved: list, cache_share: float = 1.0):
        flop = _rate(np.array(node.flops, float), np.array(node.compute_s))
        fixed = np.array(node.fixed_s)
        byte = _rate(np.array(node.bytes, float), np.maximum(np.array(node.memory_s) - fixed, 0.0))
        self.flop_s = np.stack([c / flop for c in flops])
        self.byte_s = np.stack([c / byte for c in moved])
        self.fixed = np.where(np.any(np.stack(moved) != 0, axis=0), fixed, 0.0)[:, None]
        self.overheads = np.array(node.overhead_s, dtype=float)
        self.overhead = float(np.sum(node.overhead_s))
        self.kinds = np.array(node.kinds or ("other",) * len(node.flops))
        self.reread = np.where(self.kinds == "attention", self.byte_s[3] * cache_share, 0.0)

    def kernel_s(self, flop_terms: np.ndarray, byte_terms: np.ndarray, shards: int = 1,
                 kv_reads: int = 1, decoding=None) -> np.ndarray:
        """Seconds of each kernel (kernels x steps) of steps whose monomials are the columns of ``flop_terms`` /
        ``byte_terms`` (4 x steps), launches left out; ``shards``: every kernel's FLOPs and bytes split that many
        ways (tensor parallel), its fixed memory cost and launch not; ``kv_reads``: a fused attention kernel
        reads the cached keys and values of every position it attends to (its share ``cache_share`` of the
        ``b*c`` bytes) that many times (:func:`.parallel.kv_reads`), its other bytes once; ``decoding``: the
        positions read again (one per step: the decoding sequences' caches; None: the whole ``b*c`` term)."""
        compute = self.flop_s.T @ flop_terms / shards
        memory = self.fixed + self.byte_s.T @ byte_terms / shards
        if kv_reads != 1:
            again = byte_terms[3] if decoding is None else np.asarray(decoding, dtype=float)  # (decoding's only)
            memory = memory + (kv_reads - 1) * np.outer(self.reread, again) / shards
        return np.maximum(compute, memory)

    def time_s(self, flop_terms: np.ndarray, byte_terms: np.ndarray, shards: int = 1,
               kv_reads: int = 1, decoding=None) -> np.ndarray:
        """Seconds of the steps (:meth:`kernel_s` summed, plus the launches)."""
        return self.kernel_s(flop_terms, byte_terms, shards, kv_reads, decoding).sum(axis=0) + self.overhead

    def parts(self, flop_terms: np.ndarray, byte_terms: np.ndarray, shards: int = 1, kv_reads: int = 1,
              decoding=None) -> dict:
        """{kind: seconds of the first step's kernels of that kind, their launches included} (:data:`KINDS`)."""
        per = self.kernel_s(flop_terms, byte_terms, shards, kv_reads, decoding)[:, 0] + self.overheads
        return {k: float(per[self.kinds == k].sum()) for k in KINDS}


class StepModel:
    """A step's time from its composition (see the module). ``fit``: the exact GridFit of every kernel's FLOPs
    (first half) and bytes (second half) in ``b``, ``c``; ``nodes``: {lowered batch: its :class:`Kernels`}; ``weight_bytes``, ``kv_token_bytes`` (the KV cache of one position, every layer),
    ``activation_token_bytes`` (activations per query token at no cached context: :func:`context_free_activations`) for the server's memory."""

    def __init__(self, fit, nodes: dict, weight_bytes: int, kv_token_bytes: int, activation_token_bytes: int,
                 checked: dict | None = None):
        self.fit = fit
        self.weight_bytes = weight_bytes
        self.kv_token_bytes = kv_token_bytes
        self.activation_token_bytes = activation_token_bytes
        self.checked = checked or {}
        self.shape: dict = {}  # hidden, layers, itemsize (of the hidden state): what tensor parallel reduces
        k = len(next(iter(nodes.values())).flops)
        num = np.array(fit.numerators, dtype=object) / fit.denominator
        coef = {e: np.array([float(x) for x in num[i]]) for i, e in enumerate(fit.exponents)}
        zero = np.zeros(2 * k)
        b, c = fit.symbols.index("b"), fit.symbols.index("c")

        def term(i, j):
            e = [0, 0]
            e[b], e[c] = i, j
            return coef.get(tuple(e), zero)

        self._terms = [term(0, 0), term(1, 0), term(0, 1), term(1, 1)]
        self._k = k
        self._batches = np.log(np.array(sorted(nodes), float))
        share = self.cache_share(next(iter(nodes.values())).kinds)
        self._rates = [Rates(nodes[b], [t[:k] for t in self._terms], [t[k:] for t in self._terms], share)
                       for b in sorted(nodes)]
        self.place = next(iter(nodes.values())).place  # (placement(): a pipeline stage's kernels)

    def part(self, shares) -> "StepModel":
        """The same model with kernel ``i``'s work, fixed cost and launch scaled by ``shares[i]`` (>= 0): a
        pipeline stage's program is the kernels of its layers (share 1), none of the others' (0). A kernel's
        time is ``max(compute, memory) + launch``, each linear in the scale, so a share of 0 or 1 is exact."""
        import copy

        w = np.asarray(shares, dtype=float)
        out = copy.copy(self)
        out.shape = dict(self.shape)
        out._rates = []
        for r in self._rates:
            q = copy.copy(r)
            q.flop_s, q.byte_s, q.fixed = r.flop_s * w, r.byte_s * w, r.fixed * w[:, None]
            q.overheads, q.reread = r.overheads * w, r.reread * w
            q.overhead = float(q.overheads.sum())
            out._rates.append(q)
        return out

    def cache_share(self, kinds: tuple) -> float:
        """The KV cache's part of the fused attention kernels' bytes per attended position (``kinds``: each
        kernel's): the cache of one position (every layer) over those kernels' ``b*c`` bytes, which hold a
        lowering's mask row as well (at most 1; 0 where no attention kernel reads per position)."""
        att = np.array([x == "attention" for x in kinds] or [False] * self._k)
        per_position = float(self._terms[3][self._k:][att].sum())
        return min(1.0, self.kv_token_bytes / per_position) if per_position > 0 else 0.0

    def counts(self, tokens: int, context_flops: int, context_bytes: int, longest: int):
        """Per-kernel (FLOPs, bytes) arrays of a step (floats; :meth:`exact` for the ints)."""
        one, per_token, per_step_ctx, per_seq = self._terms
        k = self._k
        flops = one[:k] + per_token[:k] * tokens + per_step_ctx[:k] * longest + per_seq[:k] * context_flops
        moved = one[k:] + per_token[k:] * tokens + per_step_ctx[k:] * longest + per_seq[k:] * context_bytes
        return flops, moved

    def time_s(self, tokens: int, context_flops: int, context_bytes: int, longest: int) -> float:
        """The step's seconds: every kernel at its own rates, plus the launches."""
        return float(self.many(tokens, [context_flops], [context_bytes], [longest])[0])

    def many(self, tokens: int, context_flops, context_bytes, longest, shards: int = 1,
             kv_reads: int = 1, decoding=None) -> np.ndarray:
        """The seconds of several steps of ``tokens`` query tokens each (the other three: one value per step);
        ``shards``: the kernels' work split over that many devices, ``kv_reads``: the times an attention kernel
        reads the cache (:meth:`Rates.kernel_s`)."""
        rates, f, b = self._at(tokens, context_flops, context_bytes, longest)
        return rates.time_s(f, b, shards, kv_reads, decoding)

    def parts(self, tokens: int, context_flops: int, context_bytes: int, longest: int, shards: int = 1,
              kv_reads: int = 1, decoding=None) -> dict:
        """One step's seconds by kernel kind (:meth:`Rates.parts`): {"gemm", "attention", "other"}."""
        rates, f, b = self._at(tokens, [context_flops], [context_bytes], [longest])
        return rates.parts(f, b, shards, kv_reads, decoding)

    def _at(self, tokens: int, context_flops, context_bytes, longest):
        """(the rates of the lowered batch nearest ``tokens``, the steps' FLOP and byte monomials)."""
        near = int(np.argmin(np.abs(self._batches - np.log(max(tokens, 1)))))
        longest = np.asarray(longest, dtype=float)
        ones, toks = np.ones_like(longest), np.full_like(longest, float(tokens))
        f = np.stack([ones, toks, longest, np.asarray(context_flops, dtype=float)])
        b = np.stack([ones, toks, longest, np.asarray(context_bytes, dtype=float)])
        return self._rates[near], f, b

    def decode_time_s(self, batch: int, context: int) -> float:
        """A decode step of ``batch`` sequences each at ``context`` cached positions (as lowered)."""
        return self.time_s(batch, batch * context, batch * context, context)

    def prefill_time_s(self, tokens: int, batch: int = 1) -> float:
        """The prefill of ``batch`` prompts of ``tokens`` from an empty cache, as one step."""
        return self.time_s(batch * tokens, batch * tokens * (tokens + 1) // 2, batch * tokens, tokens)

    def exact(self, batch: int, context: int) -> tuple[int, int]:
        """The fitted total FLOPs and bytes of the decode step at (batch, context), exact ints."""
        vals = self.fit.at({"b": batch, "c": context})
        return sum(vals[:self._k]), sum(vals[self._k:])


def context_free_activations(mems: dict) -> int | None:
    """The decode step's activations (bytes, over its arguments) at no cached context: a server's profiling
    forward (vLLM's ``profile_run``, which sizes ``gpu_memory_utilization``'s KV cache) runs flash/paged attention,
    which holds neither the ``batch x heads x context`` scores nor a copy of the cache that an XLA decode step's
    attention materialises. ``mems``: {context: the fused memory profile of the decode step at one batch}, two
    contexts. Every row's live bytes less the arguments is affine in the context at a fixed batch (each value is
    sized by 1 or by the context); extrapolated exactly to context 0 row by row, the largest is the answer (None
    where the programs differ in length)."""
    from fractions import Fraction

    (c0, m0), (c1, m1) = sorted(mems.items())[:2]
    if len(m0.during) != len(m1.during):
        return None
    best = Fraction(0)
    for d0, d1 in zip(m0.during, m1.during):
        x0, x1 = d0 - m0.argument_bytes, d1 - m1.argument_bytes
        best = max(best, x0 - Fraction(x1 - x0, c1 - c0) * c0)
    return -(-best.numerator // best.denominator)


def fit(base, hw, cache=None, stage=None, batches=BATCHES, contexts=CONTEXTS, check=CHECK,
        rate_batches=RATE_BATCHES) -> StepModel:
    """The :class:`StepModel` of ``base`` (a decode :class:`~mhlo_cost.lower.inference.StepRequest`) on ``hw``:
    lowered at ``batches`` x ``contexts``, at ``check`` and at ``rate_batches`` x the largest context (through
    ``cache``, a :class:`~.grid.StepCache`). FitError where a point not fitted (``check``, ``rate_batches``) has
    counts that differ from the fit's by a single FLOP or byte."""
    from ...walk.polyfit import fit_grid
    from .grid import StepCache
    from .serve import activation_bytes, step_study

    cache = cache or StepCache(None)
    stage = stage or (lambda text: None)
    seen: dict = {}

    def lowered(b: int, c: int):
        if (b, c) not in seen:
            stage(f"lowering the decode step at batch {b}, context {c}")
            step, _ = cache.step(replace(base, mode="decode", batch=b, context=c, tokens=1))
            study = step_study(step, hw)
            seen[(b, c)] = (step, study, Kernels.of(study))
        return seen[(b, c)]

    grid = fit_grid(lambda p: lowered(p["b"], p["c"])[2].counts(), {"b": list(batches), "c": list(contexts)})
    checks = [{"b": check[0], "c": check[1]}] + [{"b": b, "c": max(contexts)} for b in rate_batches]
    bad = grid.mismatches(lambda p: lowered(p["b"], p["c"])[2].counts(), checks)
    if bad:
        point, j, got, want = bad[0]
        raise FitError(f"the step's cost is not linear in batch and context: at {point} a kernel's count is "
                       f"{want}, the fit says {got} ({len(bad)} counts differ)")
    step, study, _ = lowered(max(batches), max(contexts))
    cache_one = step.layout.at(batch=1, context=1).nbytes
    acts = context_free_activations({c: lowered(max(batches), c)[1].fused_memory for c in contexts})
    if acts is None:  # (the lowerings' programs differ in length: the peak at the largest point, as lowered)
        acts = activation_bytes(study.fused_memory, step.layout.nbytes)
    nodes = {b: lowered(b, max(contexts))[2] for b in (*batches, *rate_batches)}
    model = StepModel(grid, nodes, step.weight_bytes, cache_one, -(-acts // max(batches)))
    itemsize = step.layout.layers[0].itemsize if step.layout.layers else 2
    model.shape = {"hidden": step.hidden, "layers": step.layers, "itemsize": itemsize}
    cstep, cstudy, ckern = lowered(*check)
    model.checked = {"point": check, "roofline_s": ckern.time_s, "model_s": model.decode_time_s(*check),
                     "counts_exact": True, "exact_at": [tuple(c.values()) for c in checks]}
    return model

"""Formulas: a program's counts, per block and in total, as exact polynomials in its shape symbols.

A :class:`Program` gives the module at any point of its symbols (a symbolic program refined there,
:mod:`mhlo_cost.ir.symbolic`; or a model lowered there). :func:`fit` takes, per symbol, a degree bound from the
program itself (:func:`mhlo_cost.ir.degree.degree_bound`, two modules one step apart), walks the module at every
point of a tensor grid of bound + 1 nodes per symbol, fits every count of every block exactly
(:func:`mhlo_cost.walk.polyfit.fit_grid`, rational arithmetic) and checks the fit at two points off the grid in
every symbol. A count that fails the check is never shown: :class:`FitRefused` says which and why; so is a
program whose blocks or op graph change with the shape. :class:`Formulas` evaluates the polynomials at a point
and makes the table every renderer writes (``report --formula``).

Counts fitted: the block table's integer columns (GEMM, convolution and vector FLOPs, transcendentals, bytes
read and written, communication bytes, ops). The peak memory is a maximum over ops, not a polynomial: it is
not fitted. Formulas are shown with the common factor of their terms taken out (``2*b*s*(64*s + 8192)``: the
integer content and the common monomial), which is exact and cheap; the JSON has the expanded form beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

from ..ir.symbolic import show_point
from ..walk.poly import Poly

#: the block table's counts a formula is fitted for
METRICS = ("gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written",
           "comm_bytes", "ops")


class FitRefused(ValueError):
    """No formula can be given as asked; ``str`` is one line for a user."""


@dataclass
class Program:
    """A program whose module exists at every point of ``symbols``: ``module_at(point)`` a
    :class:`~mhlo_cost.ir.loader.Loaded` (kept per point); the grid starts at ``start`` and moves by ``step``
    (both per symbol; default 2 and 1: a size of 1 may lower to another op graph); ``named_by`` says where the
    symbols' names come from; ``fields``: the study options the blocks are found with; ``walk``: the walk's
    (entry, convolution padding)."""

    symbols: tuple
    module_at: Callable[[dict], object]
    start: dict = field(default_factory=dict)
    step: dict = field(default_factory=dict)
    named_by: str = "module"
    fields: dict = field(default_factory=dict)
    walk: dict = field(default_factory=dict)  # WalkOptions' entry and conv_padding
    name: str = "<program>"
    _modules: dict = field(default_factory=dict)

    def at(self, point: dict):
        key = tuple(point[s] for s in self.symbols)
        if key not in self._modules:
            self._modules[key] = self.module_at(dict(point))
        return self._modules[key]

    def origin(self) -> dict:
        return {s: int(self.start.get(s, 2)) for s in self.symbols}

    def stride(self, s: str) -> int:
        return int(self.step.get(s, 1))


def block_counts(program: Program, point: dict) -> tuple[list, list[int]]:
    """(keys, values) of the program at ``point``: keys (row, metric) for every block row and TOTAL."""
    from ..analysis.isolated import WalkOptions, walk_loaded
    from .study import Study

    analysis = walk_loaded(program.at(point), WalkOptions(record="counts", **program.walk))
    frame = Study.of(analysis, **program.fields).block_frame(memory=False)
    keys, values = [], []
    for _, row in frame.iterrows():
        for m in METRICS:
            keys.append((str(row["block"]), m))
            values.append(int(row[m]))
    return keys, values


def bounds(program: Program) -> dict:
    """The degree bound per symbol (:func:`mhlo_cost.ir.degree.degree_bound` at the origin and one step on)."""
    from ..ir.degree import GraphChanged, degree_bound

    base = program.origin()
    out = {}
    for s in program.symbols:
        other = dict(base, **{s: base[s] + program.stride(s)})
        try:
            out[s] = degree_bound(program.at(base).module, program.at(other).module)
        except GraphChanged as e:
            raise FitRefused(f"{program.name}: no formula in {s}: {e} (between {show_point(base)} and "
                             f"{show_point(other)})") from None
    return out


def check_points(program: Program, degrees: dict) -> list[dict]:
    """Two points off the grid in every symbol, apart in every symbol (each symbol beyond its last node by a
    different amount, so that no two symbols are equal by construction)."""
    base, n = program.origin(), len(program.symbols)
    return [{s: base[s] + (degrees[s] + 1 + (i if k == 0 else 2 * n - 1 - i)) * program.stride(s)
             for i, s in enumerate(program.symbols)} for k in range(2)]


def fit(program: Program, stage: Callable[[str], None] = lambda _: None) -> "Formulas":
    """Every count's exact polynomial, checked at :func:`check_points`; FitRefused where it cannot be."""
    from ..walk.polyfit import fit_grid

    degrees = bounds(program)
    base = program.origin()
    nodes = {s: [base[s] + i * program.stride(s) for i in range(degrees[s] + 1)] for s in program.symbols}
    first = {}

    def sample(point):
        stage(f"counting at {show_point(point)}")
        keys, values = block_counts(program, point)
        if not first:
            first.update(point=point, keys=keys)
        elif keys != first["keys"]:
            raise FitRefused(f"{program.name}: the blocks change with the shape (at {show_point(first['point'])}: "
                             f"{_rows(first['keys'])}; at {show_point(point)}: {_rows(keys)}): no one formula per "
                             "block")
        return values

    grid = fit_grid(sample, nodes)
    checks = check_points(program, degrees)
    bad = grid.mismatches(sample, checks)
    if bad:
        point, j, fitted, actual = bad[0]
        row, metric = first["keys"][j]
        raise FitRefused(f"{program.name}: the fit of {metric} of {row} failed its check at {show_point(point)} "
                         f"(fitted {fitted:,}, counted {actual:,}; {len(bad)} count(s) failed): the degree bound "
                         f"({show_point(degrees)}) is too low or the count is no polynomial in the symbols (a loop's "
                         "trip count, a maximum): no formula is given")
    polys = dict(zip(first["keys"], grid.polys()))
    return Formulas(program.symbols, polys, degrees, nodes, checks, program.named_by, program.name)


def _rows(keys) -> str:
    rows = list(dict.fromkeys(r for r, _ in keys))
    return ", ".join(rows[:6]) + (", ..." if len(rows) > 6 else "")


@dataclass
class Formulas:
    """The fitted polynomials: ``polys[(row, metric)]``, rows as the block table has them (TOTAL last)."""

    symbols: tuple
    polys: dict
    degrees: dict
    nodes: dict
    checks: list
    named_by: str = "module"
    name: str = "<program>"

    @property
    def rows(self) -> list[str]:
        return list(dict.fromkeys(r for r, _ in self.polys))

    def at(self, point: dict) -> dict:
        """{(row, metric): int} at ``point``."""
        return {k: p.at(point) for k, p in self.polys.items()}

    def repeated(self, rows, times: int, label: str) -> None:
        """Add the row ``label``: TOTAL with ``rows`` (blocks a lowering had once) counted ``times`` times."""
        for m in METRICS:
            self.polys[(label, m)] = self.polys[("TOTAL", m)] + (times - 1) * sum(
                (self.polys[(r, m)] for r in rows), Poly())

    def table(self, title: str | None = None):
        """The :class:`~mhlo_cost.views.table.Table` of the formulas: one row per block and count (counts that are
        zero in every row left out, and said so)."""
        import pandas as pd

        from ..views.table import Table

        zero = [m for m in METRICS if all(not self.polys[(r, m)].terms for r in self.rows)]
        records = [{"block": r, "count": m, "formula": factored(self.polys[(r, m)]),
                    "expanded": str(self.polys[(r, m)])} for r in self.rows for m in METRICS if m not in zero]
        frame = pd.DataFrame(records, columns=["block", "count", "formula", "expanded"])
        notes = [f"symbols: {', '.join(self.symbols)} ({self._named()}); degree bounds {show_point(self.degrees)}; "
                 f"fitted on {math.prod(len(v) for v in self.nodes.values())} points "
                 f"({'; '.join(f'{s} in {v}' for s, v in self.nodes.items())}), checked at "
                 f"{' and '.join(show_point(c) for c in self.checks)}"]
        if zero:
            notes.append(f"zero at every point: {', '.join(zero)}")
        notes.append("peak memory is a maximum over ops, not a polynomial: not fitted")
        meta = {"tool": "mhlo-cost", "source": self.name, "symbols": list(self.symbols), "named_by": self.named_by,
                "degree_bounds": self.degrees, "nodes": self.nodes, "check_points": self.checks}
        return Table(title or f"{self.name}: counts as polynomials in {', '.join(self.symbols)}", frame=frame,
                     text_frame=frame[["block", "count", "formula"]], notes=notes, meta=meta)

    def _named(self) -> str:
        return {"module": "named in the module", "position": "main's ?-dimensions, named arg<I>_<D>"}.get(
            self.named_by, self.named_by)


def factored(p: Poly) -> str:
    """``p`` with the common factor of its terms (integer content, common monomial) taken out: ``2*b*s*(3*s + 1)``;
    a single term or a polynomial with no common factor as ``str`` writes it."""
    if len(p.terms) < 2:
        return str(p)
    content = Fraction(math.gcd(*(c.numerator for c in p.terms.values())),
                       math.lcm(*(c.denominator for c in p.terms.values())))
    if any(c < 0 for c in p.terms.values()) and all(c < 0 for c in p.terms.values()):
        content = -content
    common = {}
    for name in p.symbols:
        common[name] = min(dict(m).get(name, 0) for m in p.terms)
    common = {k: v for k, v in common.items() if v}
    if content == 1 and not common:
        return str(p)
    head = Poly({tuple(sorted(common.items())): content})
    rest = Poly({tuple((n, e - common.get(n, 0)) for n, e in m if e - common.get(n, 0)): c / content
                 for m, c in p.terms.items()})
    return f"{head}*({rest})"


def symbolic_program(options, start: dict | None = None) -> Program:
    """The :class:`Program` of a symbolic file (``options``: :class:`~mhlo_cost.studies.study.StudyOptions`;
    parsed once, in the reader's child where the guard is on, and refined at each point here); ``start``: the
    grid's origin (``--shapes`` with ``--formula``). FitRefused for a static program or unknown names."""
    from ..ir import symbolic
    from ..ir.refine import refine
    from ..ir.loader import Loaded, load, require_jax

    require_jax()
    loaded = load(options.source, name=options.name)
    name = loaded.name
    if not symbolic.is_symbolic(loaded.module):
        raise FitRefused(f"{name}: the program's shapes are static: a formula needs a symbolic program (jax.export "
                         "with symbolic dimensions) or lowerings at several shapes (mhlo-cost lower --model stdit3 "
                         "--formula)")
    try:
        found = symbolic.symbols(loaded.module)
    except symbolic.SymbolicError as e:
        raise FitRefused(f"{name}: {e}") from None
    unknown = sorted(set(start or {}) - set(found.names))
    if unknown:
        raise FitRefused(f"{name}: --shapes names {', '.join(unknown)}: the program's symbols are "
                         f"{symbolic.describe(found)}")

    def module_at(point):
        try:
            return Loaded(refine(loaded.module, point, loaded.context), loaded.context, name, loaded.format)
        except symbolic.SymbolicError as e:
            raise FitRefused(f"{name}: {e}") from None

    fields = {k: getattr(options, k) for k in ("blocks", "block_pattern", "norms_per_block")}
    walk = {k: getattr(options, k) for k in ("entry", "conv_padding")}
    return Program(found.names, module_at, start=dict(start or {}), named_by=found.named_by, fields=fields,
                   walk=walk, name=name)


#: STDiT3's formula symbols: batch, latent frames (= frames of tokens, patch 1 in time), tokens per frame
STDIT3_SYMBOLS = ("B", "T", "S")
STDIT3_REPEATED = ("spatial_blocks.0", "temporal_blocks.0")


def stdit3_program(cfg) -> Program:
    """STDiT3 (the JAX model, ``cfg`` an :class:`~mhlo_cost.lower.models.config.STDiT3Config`) lowered at depth 1
    at each point of B, T, S: batch ``B``, ``T`` frames of tokens, ``S`` tokens per frame (the latent ``S``
    patches high and one wide: a block's counts depend on the tokens per frame alone). The repeated blocks are
    identical, so one of each gives their formulas; :meth:`Formulas.repeated` counts ``cfg.depth`` of them."""
    from dataclasses import replace

    from ..ir.loader import load
    from ..lower.models import stdit3

    pt, ph, pw = cfg.patch

    def module_at(point):
        at = replace(cfg, depth=1, batch=point["B"], latent_t=point["T"] * pt, latent_h=point["S"] * ph,
                     latent_w=pw)
        return load(stdit3.lower(at).as_text(debug_info=True), isolate=False, name="stdit3")

    return Program(STDIT3_SYMBOLS, module_at, named_by="STDiT3: batch B, T frames of tokens, S tokens per frame",
                   name="stdit3")


def stdit3_formulas(cfg, stage: Callable[[str], None] = lambda _: None) -> Formulas:
    """STDiT3's formulas per block in B, T, S, with the row ``TOTAL (depth N)``: the whole model at ``cfg.depth``."""
    formulas = fit(stdit3_program(cfg), stage=stage)
    formulas.repeated(STDIT3_REPEATED, cfg.depth, f"TOTAL (depth {cfg.depth})")
    return formulas

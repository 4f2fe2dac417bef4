"""Exact polynomial interpolation of integer counts on a tensor grid of shape points.

A program's counts are polynomials in its shape symbols of a degree the program bounds. Given their values at
every point of a grid (``nodes[symbol]`` = distinct integers, at least degree + 1 per symbol), :func:`fit_grid`
recovers the polynomials exactly (rational arithmetic, no float anywhere): one inverse Vandermonde matrix per
symbol, applied along that symbol's axis. :class:`GridFit` evaluates all of them at a new point at once (an
integer dot product over the monomials) and turns them into :class:`~mhlo_cost.walk.poly.Poly` for display.
A fit is only as good as its degree bound: check it on points it did not use (:meth:`GridFit.mismatches`)
before trusting it, and never report one that failed.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import numpy as np

from .poly import Poly


def _inverse_vandermonde(xs: Sequence[int]) -> list[list[Fraction]]:
    """The exact inverse of V[i][j] = xs[i] ** j (Gauss-Jordan over the rationals)."""
    n = len(xs)
    if len(set(xs)) != n:
        raise ValueError(f"interpolation nodes must be distinct: {list(xs)}")
    rows = [[Fraction(x) ** j for j in range(n)] + [Fraction(int(i == k)) for k in range(n)]
            for i, x in enumerate(xs)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [v / lead for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                f = rows[r][col]
                rows[r] = [a - f * b for a, b in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


class GridFit:
    """Polynomials fitted on a tensor grid: ``numerators[e, j] / denominator`` is the coefficient of monomial
    ``e`` (a tuple of exponents, one per symbol, in ``symbols`` order) in polynomial ``j``."""

    def __init__(self, symbols: tuple[str, ...], exponents: list[tuple[int, ...]], numerators: np.ndarray,
                 denominator: int):
        self.symbols = symbols
        self.exponents = exponents
        self.numerators = numerators      # object array (monomials, polynomials) of Python ints
        self.denominator = denominator

    def __len__(self) -> int:
        return self.numerators.shape[1]

    def at(self, point: Mapping[str, int]) -> list[int]:
        """Every polynomial's exact value at ``point``; ValueError where one is not an integer."""
        missing = [s for s in self.symbols if s not in point]
        if missing:
            raise ValueError(f"no value for shape symbol(s) {', '.join(missing)}")
        powers = np.empty(len(self.exponents), dtype=object)
        for i, e in enumerate(self.exponents):
            powers[i] = math.prod(int(point[s]) ** k for s, k in zip(self.symbols, e))
        totals = powers.dot(self.numerators) if len(self.exponents) else np.zeros(len(self), dtype=object)
        out = []
        for t in totals:
            q, r = divmod(int(t), self.denominator)
            if r:
                raise ValueError(f"a fitted count is not an integer at {dict(point)}: the degree bound is wrong")
            out.append(q)
        return out

    def poly(self, j: int) -> Poly:
        terms = {}
        for e, num in zip(self.exponents, self.numerators[:, j]):
            if num:
                terms[tuple((s, k) for s, k in zip(self.symbols, e) if k)] = Fraction(int(num), self.denominator)
        return Poly(terms)

    def polys(self) -> list[Poly]:
        return [self.poly(j) for j in range(len(self))]

    def mismatches(self, sample: Callable[[dict], Sequence[int]], points: Sequence[Mapping[str, int]]
                   ) -> list[tuple[dict, int, int, int]]:
        """(point, index, fitted, actual) for every value the fit gets wrong at ``points`` (the check points)."""
        bad = []
        for point in points:
            actual = list(sample(dict(point)))
            if len(actual) != len(self):
                raise ValueError(f"the program has {len(actual)} counts at {dict(point)}, the fit {len(self)}: "
                                 "its op graph changes with the shape")
            fitted = self.at(point)
            bad += [(dict(point), j, f, a) for j, (f, a) in enumerate(zip(fitted, actual)) if f != a]
        return bad


def fit_grid(sample: Callable[[dict], Sequence[int]], nodes: Mapping[str, Sequence[int]]) -> GridFit:
    """Fit the polynomials whose values ``sample(point)`` gives at every point of the grid ``nodes``.

    ``nodes[s]`` lists the values of symbol ``s`` (degree in ``s`` <= len - 1). ``sample`` returns a sequence of
    integers of the same length at every point (one per count), else ValueError."""
    symbols = tuple(nodes)
    axes = [list(nodes[s]) for s in symbols]
    grid = list(itertools.product(*axes))
    values = [list(sample(dict(zip(symbols, p)))) for p in grid]
    m = len(values[0]) if values else 0
    if any(len(v) != m for v in values):
        raise ValueError("the program's counts differ in number between shape points: its op graph changes "
                         "with the shape, so no one polynomial per count exists")
    array = np.empty((len(grid), m), dtype=object)
    for i, v in enumerate(values):
        array[i, :] = [Fraction(int(x)) for x in v]
    array = array.reshape([len(a) for a in axes] + [m])
    for axis, xs in enumerate(axes):
        inverse = np.array(_inverse_vandermonde(xs), dtype=object)
        array = np.moveaxis(np.tensordot(inverse, array, axes=([1], [axis])), 0, axis)
    exponents = list(itertools.product(*[range(len(a)) for a in axes]))
    flat = array.reshape(len(exponents), m)
    denominator = math.lcm(1, *(c.denominator for c in flat.flat))
    numerators = np.empty(flat.shape, dtype=object)
    for idx, c in np.ndenumerate(flat):
        numerators[idx] = c.numerator * (denominator // c.denominator)
    return GridFit(symbols, exponents, numerators, denominator)


def degree_along(values: Sequence[int]) -> int | None:
    """The degree of the polynomial through equally spaced samples ``values`` (finite differences): the first
    level whose differences are all equal, seen on at least two of them; None when the samples cannot tell."""
    diffs = [int(v) for v in values]
    for degree in range(len(diffs) - 1):
        if all(d == diffs[0] for d in diffs[1:]):
            return degree
        diffs = [b - a for a, b in zip(diffs, diffs[1:])]
    return None

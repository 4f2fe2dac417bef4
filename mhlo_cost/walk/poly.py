"""Exact polynomials in named shape symbols: the cost of a program as a function of its shape.

A static-shape program's counts are polynomials in its shape parameters (a matmul's FLOPs are a product of
dimensions, attention is quadratic in the sequence). :class:`Poly` holds one with rational coefficients
(``fractions.Fraction``; a count's polynomial may have them, e.g. ``s*(s+1)/2``, while every value it takes at
an integer point is an integer) and evaluates it exactly: :meth:`Poly.at` returns a Python ``int`` and refuses a
point where the value is not one. ``str`` writes it in Python syntax (``2*b*s**2 + 3*b``), deterministically.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Mapping

Monomial = tuple  # ((symbol, exponent), ...) sorted by symbol; () is the constant term


def _mul_monomials(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for name, exp in b:
        powers[name] = powers.get(name, 0) + exp
    return tuple(sorted(powers.items()))


class Poly:
    """A polynomial with exact rational coefficients in named symbols; immutable."""

    __slots__ = ("terms",)

    def __init__(self, terms: Mapping[Monomial, Fraction] | None = None):
        merged: dict = {}
        for m, c in (terms or {}).items():  # a monomial's factors in any order, a symbol twice: one key
            key = _mul_monomials((), tuple((n, e) for n, e in m if e))
            merged[key] = merged.get(key, 0) + Fraction(c)
        self.terms = {m: c for m, c in merged.items() if c != 0}

    @classmethod
    def symbol(cls, name: str) -> "Poly":
        if not name.isidentifier():
            raise ValueError(f"a shape symbol is a name (letters, digits, '_'), not {name!r}")
        return cls({((name, 1),): Fraction(1)})

    @classmethod
    def const(cls, value) -> "Poly":
        return cls({(): Fraction(value)})

    @staticmethod
    def lift(value) -> "Poly":
        return value if isinstance(value, Poly) else Poly.const(value)

    def __add__(self, other) -> "Poly":
        other = Poly.lift(other)
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Poly(terms)

    __radd__ = __add__

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other) -> "Poly":
        return self + (-Poly.lift(other))

    def __rsub__(self, other) -> "Poly":
        return Poly.lift(other) - self

    def __mul__(self, other) -> "Poly":
        other = Poly.lift(other)
        terms: dict = {}
        for ma, ca in self.terms.items():
            for mb, cb in other.terms.items():
                m = _mul_monomials(ma, mb)
                terms[m] = terms.get(m, 0) + ca * cb
        return Poly(terms)

    __rmul__ = __mul__

    def __pow__(self, exp: int) -> "Poly":
        if not isinstance(exp, int) or exp < 0:
            raise ValueError("a polynomial's power is a non-negative integer")
        out = Poly.const(1)
        for _ in range(exp):
            out = out * self
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, (int, Fraction)):
            other = Poly.const(other)
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(sorted({name for m in self.terms for name, _ in m}))

    def degree(self, name: str | None = None) -> int:
        """The degree in ``name`` (total degree without one); 0 for a constant, -1 for the zero polynomial."""
        if not self.terms:
            return -1
        return max(sum(e for n, e in m if name is None or n == name) for m in self.terms)

    def is_constant(self) -> bool:
        return all(m == () for m in self.terms)

    def at(self, point: Mapping[str, int]) -> int:
        """The exact integer value at ``point`` (every symbol bound); ValueError when it is not an integer."""
        missing = [s for s in self.symbols if s not in point]
        if missing:
            raise ValueError(f"no value for shape symbol(s) {', '.join(missing)}")
        total = Fraction(0)
        for m, c in self.terms.items():
            value = c
            for name, exp in m:
                value *= Fraction(point[name]) ** exp
            total += value
        if total.denominator != 1:
            raise ValueError(f"{self} is not an integer at {dict(point)} ({total})")
        return total.numerator

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        order = sorted(self.terms, key=lambda m: (-sum(e for _, e in m), m))
        text = ""
        for i, m in enumerate(order):
            c = self.terms[m]
            sign = "-" if c < 0 else "+"
            body = _term(abs(c), m)
            text += (f"-{body}" if sign == "-" else body) if i == 0 else f" {sign} {body}"
        return text

    def __repr__(self) -> str:
        return f"Poly({self})"


def _term(c: Fraction, m: Monomial) -> str:
    factors = [name if exp == 1 else f"{name}**{exp}" for name, exp in m]
    if c.denominator != 1:
        head = f"{c.numerator}/{c.denominator}"
        return "*".join(factors) + f"*{head}" if factors else head
    if c == 1 and factors:
        return "*".join(factors)
    return "*".join([str(c.numerator)] + factors)

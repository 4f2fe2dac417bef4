"""Nested frames followed without Python recursion.

The sweep follows call frames and region bodies as deep as the program nests them (a chain of 3,000 nested
``func.call`` s is 3,000 frames). Written as recursion, that depth is Python's call depth and ends in a
``RecursionError``; written as generators, it is a list:

    def _prepare(self, fr):           # a generator: ``yield sub`` asks for generator ``sub``'s return value
        ...
        child = yield self._prepare(cf)
        ...
        return p

    p = run(self._prepare(fr))        # the generators driven from one loop, the stack a list

The order in which the steps run is the recursion's, step for step: only where the stack lives changes.
"""
from __future__ import annotations

from types import GeneratorType


def run(gen: GeneratorType):
    """The return value of generator ``gen``, whose ``yield sub`` (``sub`` a generator) asks for ``sub``'s return
    value; driven by a loop, so that nesting of any depth takes no Python stack. An exception raised in a nested
    generator ends every generator above it (none of them handles one)."""
    stack = [gen]
    value = None
    while True:
        try:
            sub = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            value = done.value
            continue
        if type(sub) is not GeneratorType:
            raise TypeError(f"a nested step yielded {type(sub).__name__}, not a generator")
        stack.append(sub)
        value = None

"""attention._forward_from (issue 41: the attention search made once per program, and made faster): the chain rows
reached from a score dot, checked against a plain search of the producer graph written here, on chains whose
producers all point back (the rows before the dot are skipped) and on one with a producer after its reader (they
are not)."""
from __future__ import annotations

import random

from mhlo_cost.roofline.attention import _forward_from, _links


def _reached(qk: int, chain: set, producers) -> set:
    """The chain rows with a path from ``qk`` along producer edges that stay in the chain (a fixed point)."""
    out: set = set()
    grew = True
    while grew:
        grew = False
        for i in chain - out:
            if any(p == qk or p in out for p in producers[i] if isinstance(p, int)):
                out.add(i)
                grew = True
    return out


def test_forward_from_matches_a_plain_search_on_program_order_graphs():
    rng = random.Random(41)
    for _ in range(200):
        n = rng.randint(3, 40)
        producers = [tuple(rng.choice([None, "arg0", *range(i)]) for _ in range(rng.randint(0, 3))) if i else ()
                     for i in range(n)]
        qk = rng.randrange(n)
        chain = {i for i in range(n) if i != qk and rng.random() < 0.7}
        links = _links(chain, producers)
        assert links[2] is True  # every row reads earlier rows only
        assert _forward_from(qk, links) == _reached(qk, chain, producers)


def test_forward_from_a_producer_after_its_reader_is_not_skipped():
    # row 1 reads row 3 (the dot) and row 4 reads row 1: both reached, though row 1 comes before the dot
    producers = [(), (3,), (0,), (2,), (1,)]
    links = _links({0, 1, 2, 4}, producers)
    assert links[2] is False
    assert _reached(3, {0, 1, 2, 4}, producers) == {1, 4}
    assert _forward_from(3, links) == {1, 4}

"""Block kinds that carry their tower: ``encoder/layers`` and ``decoder/layers``, not ``layers`` twice.

A model with two towers of one kind of block (Whisper's and T5's encoder and decoder, CLIP's and SigLIP's
text and vision models) names both ``layers.0`` ... under different scopes. Blocks of one kind whose
scopes differ (indices aside: ConvNeXt's ``stages.0/blocks.0`` and ``stages.1/blocks.0`` are one tower)
get the kind ``<tower>/<kind>``, where the tower is their scope path without the leading components all
of them share: ``model/encoder/layers.0`` and ``model/decoder/layers.0`` are ``encoder/layers`` and
``decoder/layers``; ``text_model/encoder/layers.0`` is ``text_model/encoder/layers``. Where there is one
tower the kind stays short (``spatial``, ``h``, ``blocks``).
"""
from __future__ import annotations

import re
from dataclasses import replace

from . import index_of

_INDEX = re.compile(r"(?:[./_]\d+|\[\d+\])(?=$|[/.\[])")


def tower_of(name: str) -> tuple[str, ...]:
    """The scope components above a block, indices dropped: ``model/encoder/layers.3`` -> (model, encoder);
    ``stages.1/blocks.2`` -> (stages,); ``blocks.2.1`` -> ()."""
    base, _ = index_of(name)
    comps = [c for c in re.split(r"[/.]", _INDEX.sub("", base)) if c]
    return tuple(comps[:-1])


def with_towers(blocks):
    """``blocks`` (a :class:`~mhlo_cost.analysis.collectors.Blocks`) with the kinds of blocks found in several towers
    prefixed by their tower; the same object where every kind lives in one tower."""
    towers: dict[str, dict[tuple, None]] = {}
    for b in blocks.blocks:
        towers.setdefault(b.kind, {})[tower_of(b.name)] = None
    prefix: dict[tuple, str] = {}
    for kind, ts in towers.items():
        if len(ts) < 2:
            continue
        paths = list(ts)
        common = 0
        while all(len(t) > common and t[common] == paths[0][common] for t in paths):
            common += 1
        for t in paths:
            prefix[(kind, t)] = "/".join(t[common:])
    if not prefix:
        return blocks
    out = []
    for b in blocks.blocks:
        p = prefix.get((b.kind, tower_of(b.name)))
        out.append(replace(b, kind=f"{p}/{b.kind}") if p else b)
    return replace(blocks, blocks=out)

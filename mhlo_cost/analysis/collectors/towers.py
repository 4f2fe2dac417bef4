"""Block kinds that carry their tower: ``encoder/layers`` and ``decoder/layers``, not ``layers`` twice.

A model with two towers of one kind of block (Whisper's and T5's encoder and decoder, CLIP's and SigLIP's
text and vision models) names both ``layers.0`` ... under different scopes. Blocks of one kind whose
scopes differ (indices aside: ConvNeXt's ``stages.0/blocks.0`` and ``stages.1/blocks.0`` are one tower)
get the kind ``<tower>/<kind>``, where the tower is their scope path without the leading components all
of them share: ``model/encoder/layers.0`` and ``model/decoder/layers.0`` are ``encoder/layers`` and
``decoder/layers``; ``text_model/encoder/layers.0`` is ``text_model/encoder/layers``. Where there is one
tower the kind stays short (``spatial``, ``h``, ``blocks``).

A vision-language model's vision tower is a kind of its own even where its blocks' name is not shared:
Qwen2-VL's ``model/visual/blocks.0`` is ``visual/blocks`` beside the language model's ``layers``; LLaVA's
``model/vision_tower/vision_model/encoder/layers.0`` is ``vision_tower/vision_model/encoder/layers``. The
tower is the scope path from its first vision component (``visual``, ``vision``, ``vision_*``,
``image_encoder``) on; this applies where the model also has blocks outside it (a vision-only model keeps
short kinds).
"""
from __future__ import annotations

import re
from dataclasses import replace

from . import index_of

_INDEX = re.compile(r"(?:[./_]\d+|\[\d+\])(?=$|[/.\[])")
_VISION = re.compile(r"^(visual|vision(_\w+)?|image_encoder)$")


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
    prefix.update(_vision_towers(blocks.blocks, prefix))
    if not prefix:
        return blocks
    out = []
    for b in blocks.blocks:
        p = prefix.get((b.kind, tower_of(b.name)))
        out.append(replace(b, kind=f"{p}/{b.kind}") if p else b)
    return replace(blocks, blocks=out)


def vision_tower(tower: tuple[str, ...]) -> str | None:
    """The tower's path from its first vision component on (``('model', 'visual')`` -> ``visual``); None
    where no component names a vision tower."""
    for i, comp in enumerate(tower):
        if _VISION.match(comp):
            return "/".join(tower[i:])
    return None


def _vision_towers(blocks, prefix: dict) -> dict:
    """(kind, tower) -> prefix for blocks in a vision tower not prefixed already, where some blocks lie outside
    every vision tower."""
    seen = {(b.kind, tower_of(b.name)) for b in blocks}
    vision = {key: vision_tower(key[1]) for key in seen if key not in prefix}
    if all(vision_tower(t) is not None for _, t in seen):
        return {}
    return {key: p for key, p in vision.items() if p is not None}

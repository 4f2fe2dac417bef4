"""Processes that race on one cache (tests/test_cache.py): spawned by name, so module-level."""
from __future__ import annotations

from mhlo_cost.files.cache import COUNT, TEXT, DiskCache, ListOf, Record, Schema

SCHEMA = Schema("race/entries", 1, Record({"writer": TEXT, "round": COUNT, "values": ListOf(COUNT)}), blob=True)
KEYS = 4
SIZE = 20000  # values per payload, and bytes of blob: entries of a few hundred KB, so writes take a while


def payload(writer: str, rnd: int) -> tuple[dict, bytes]:
    """What ``writer`` keeps in round ``rnd``: every value and every blob byte says who and when."""
    return {"writer": writer, "round": rnd, "values": [rnd] * SIZE}, bytes([rnd % 256]) * SIZE


def write(root: str, writer: str, rounds: int) -> None:
    cache = DiskCache(root, SCHEMA, note=_fail)
    for rnd in range(rounds):
        for k in range(KEYS):
            cache.put({"key": k}, *payload(writer, rnd))


def read(root: str, done, out) -> None:
    """Read every key again and again until ``done`` is set (the writers have finished), then once more; put on
    ``out`` how many entries were seen (each whole and one writer's), or the first note (a torn or mixed one)."""
    notes: list = []
    cache = DiskCache(root, SCHEMA, note=notes.append)
    seen = 0
    last = False
    while not last:
        last = done.is_set()
        for k in range(KEYS):
            found = cache.get_blob({"key": k})
            if found is not None:
                meta, blob = found
                if (meta, blob) != payload(meta["writer"], meta["round"]):
                    notes.append(f"a mixed entry: {meta['writer']} {meta['round']}")
                seen += 1
    out.put(notes[0] if notes else seen)


def _fail(text: str) -> None:
    raise AssertionError(text)

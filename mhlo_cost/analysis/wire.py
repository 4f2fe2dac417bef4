"""An analysis as bytes and back: how the walk in the MLIR reader's child process hands its result to a
parent that imports no jaxlib (:mod:`mhlo_cost.analysis.isolated`).

Standard library only. The rows go by column (each column a list of plain values; the locations and the
tensor types, shared by many rows, as tables with an index per row), which pickles in a fraction of the time
the row objects themselves take; the rest of the analysis (the liveness record, the data flow, a training
step's arguments) is pickled as it is, except the liveness record's frames: one flat table, each frame's rows
and the frames it refers to as numbers (pickle would follow a chain of thousands of nested calls by recursion).
Every row object keeps its identity: a row in several lists is one object after decoding too.
"""
from __future__ import annotations

import pickle
import sys
from dataclasses import fields
from operator import attrgetter, is_

from ..walk.frames import Frame, Recording, Region, Return
from ..walk.costvalue import METRICS, Cost
from ..walk.row import LocationInfo, Row

#: Row fields sent as they are (plain values); ``loc``, ``result`` and ``operands`` go through tables, ``cost`` as
#: one column per metric.
_PLAIN = tuple(f.name for f in fields(Row) if f.name not in ("loc", "result", "operands", "cost")) + METRICS
_ROW_FIELDS = tuple(f.name for f in fields(Row))


#: More rows than this many times the program's, counted over every frame's list, are not sent (:func:`worth_sending`).
MAX_SPREAD = 8


def worth_sending(analysis) -> bool:
    """Whether the rows of every frame together stay within :data:`MAX_SPREAD` times the program's rows (plus
    100k): a chain of thousands of calls gives each function a table of its callees' rows, quadratic in all."""
    lists = {id(analysis.rows): len(analysis.rows)}
    for f in _frames(analysis.liveness):
        lists[id(f.rows)] = len(f.rows)
    return sum(lists.values()) <= MAX_SPREAD * len(analysis.rows) + 100_000


def encode(analysis) -> bytes:
    """``analysis`` (an :class:`~mhlo_cost.analysis.Analysis` or a subclass, made by the walk) as bytes."""
    lists: dict[int, int] = {}  # id(row list) -> its number
    row_lists: list[list] = []
    frames = _frames(analysis.liveness)
    for rows in [analysis.rows] + [f.rows for f in frames]:
        if id(rows) not in lists:
            lists[id(rows)] = len(row_lists)
            row_lists.append(rows)
    if len(row_lists) == 1:  # the usual case: every frame's rows are the program's (no call, no loop)
        rows_all, ids = row_lists[0], None
    else:
        rows_all, ids = _number(row_lists)
    columns = _columns(rows_all)
    locs, loc_ids = _table(map(attrgetter("loc"), rows_all))
    types, result_ids = _table(map(attrgetter("result"), rows_all))
    operand_sets, operand_ids = _table(map(attrgetter("operands"), rows_all))
    loc_table = [(x.name, x.scope, x.file_line, x.site, x.stack) for x in locs]
    extra = dict(analysis.__dict__)
    extra.pop("rows")
    extra.pop("_memory", None)
    extra.pop("_memory_alongside", None)
    extra.pop("_ops", None)
    extra.pop("_summary_memo", None)
    extra.pop("_pricing_memo", None)  # (mhlo_cost.roofline.program: rebuilt where the analysis is priced)
    frame_table = _frame_table(frames, lists)
    rec = extra.pop("liveness", None)
    record = None if rec is None else (None if rec.entry is None else 0, rec.args, rec.alias, rec.local,
                                       rec.arg_names, rec.arg_elems)
    return pickle.dumps((type(analysis), columns, loc_table, loc_ids, types, result_ids, operand_sets, operand_ids,
                         ids, extra, frame_table, record), protocol=pickle.HIGHEST_PROTOCOL)


def decode(blob: bytes):
    """The analysis :func:`encode` wrote."""
    (cls, columns, loc_table, loc_ids, types, result_ids, operand_sets, operand_ids, ids, extra,
     frame_table, record) = pickle.loads(blob)
    resolved = LocationInfo.resolved
    locs = [resolved(*t) for t in loc_table]
    values = dict(columns)
    values["loc"] = list(map(locs.__getitem__, loc_ids))
    values["result"] = list(map(types.__getitem__, result_ids))
    values["operands"] = list(map(operand_sets.__getitem__, operand_ids))
    values["cost"] = list(map(Cost, *(columns[m] for m in METRICS)))
    rows_all = list(map(Row, *(values[name] for name in _ROW_FIELDS)))
    row_lists = [rows_all] if ids is None else [list(rows_all) if got is None else list(map(rows_all.__getitem__, got))
                                                for got in ids]
    frames = _frames_from(frame_table, row_lists)
    analysis = cls.__new__(cls)
    analysis.__dict__.update(extra)
    analysis.rows = row_lists[0]
    analysis.liveness = None if record is None else Recording(None if record[0] is None else frames[0], *record[1:])
    analysis._memory = None
    analysis._ops = None
    return analysis


def _frame_table(frames: list[Frame], lists: dict[int, int]) -> list[tuple]:
    """Each frame as plain values: its rows' list number, its items, pending replays and collected frames with
    every frame they name as its number in ``frames`` (the entry's first)."""
    number = {id(f): i for i, f in enumerate(frames)}

    def no(f):
        return None if f is None else number[id(f)]

    table = []
    for f in frames:
        items = [(it.pos, it.uses) if isinstance(it, Return) else
                 (it.name, it.uses, it.defs, it.sizes, [(no(c), *rest) for c, *rest in it.children],
                  [no(b) for b in it.branches], it.argpos, it.passthrough, it.start, it.end) for it in f.items]
        table.append((lists[id(f.rows)], items, [(no(c), *rest) for c, *rest in f.pending],
                      [no(c) for c in f.collected], f.open))
    return table


def _frames_from(table: list[tuple], row_lists: list[list]) -> list[Frame]:
    """The frames :func:`_frame_table` wrote, each referring to the others again."""
    frames = [Frame() for _ in table]

    def at(i):
        return None if i is None else frames[i]

    for f, (rows, items, pending, collected, open_) in zip(frames, table):
        f.rows = row_lists[rows]
        f.items = [Return(*it) if len(it) == 2 else
                   Region(*it[:4], [(at(c), *rest) for c, *rest in it[4]], [at(b) for b in it[5]], *it[6:])
                   for it in items]
        f.pending = [(at(c), *rest) for c, *rest in pending]
        f.collected = [at(c) for c in collected]
        f.open = open_
    return frames


def _columns(rows: list) -> dict[str, list]:
    """name -> the values of that plain field of ``rows``, in order (op names interned: sent once each)."""
    if not rows:
        return {name: [] for name in _PLAIN}
    columns = dict(zip(_PLAIN, map(list, zip(*map(attrgetter(*_PLAIN), rows)))))
    columns["op"] = list(map(sys.intern, columns["op"]))
    return columns


def _number(row_lists: list[list]) -> tuple[list, list[list[int] | None]]:
    """(every distinct row of ``row_lists``, by identity, in order of first use; each list as the rows' numbers
    in it, None for a list of exactly those rows in that order: the frames' lists are often the program's)."""
    first: dict[int, object] = {}
    for rows in row_lists:
        first.update(zip(map(id, rows), rows))
    rows_all = list(first.values())
    number = dict(zip(first, range(len(rows_all))))
    return rows_all, [None if len(rows) == len(rows_all) and all(map(is_, rows, rows_all)) else
                      list(map(number.__getitem__, map(id, rows))) for rows in row_lists]


def _table(objects) -> tuple[list, list[int]]:
    """(the distinct objects, by identity, in order of first use; each object's index among them)."""
    seen: dict[int, int] = {}
    table: list = []
    out = []
    for o in objects:
        k = seen.get(id(o))
        if k is None:
            k = seen[id(o)] = len(table)
            table.append(o)
        out.append(k)
    return table, out


def _frames(recording: Recording | None) -> list[Frame]:
    """Every frame of ``recording`` (the entry's, its replayed and collected sub-walks), each once."""
    if recording is None or recording.entry is None:
        return []
    seen: dict[int, Frame] = {}
    stack = [recording.entry]
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen[id(f)] = f
        stack.extend(f.collected)
        stack.extend(child for child, *_ in f.pending if child is not None)
        for item in f.items:
            if isinstance(item, Region):
                stack.extend(child for child, *_ in item.children if child is not None)
                stack.extend(item.branches)
    return list(seen.values())

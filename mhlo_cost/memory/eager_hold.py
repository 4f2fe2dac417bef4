"""How long PyTorch eager keeps a value: until its last Python reference dies, not at its last use.

A torch program lowered through torchax or torch-xla carries, per op, the Python call stack of the framework
call that made it: a chain of call sites, each a function name and the source position of the call made in
it. Eager PyTorch frees a tensor when nothing references it any more; from the stacks two references can be
told apart from a temporary that dies at the end of its statement:

* **an argument**: a value read by a call made in frame F (the deepest frame the producer's and the reader's
  stacks share) is referenced by F's call expression until that call returns: it lives until the last op of
  the callee's invocation (a block's input lives while the block runs, although its last reader is the first
  norm);
* **a name**: a value made by one statement of F and read by another statement of F was bound to a name (or
  stored in an object) in between: it lives until F returns, i.e. until the last op of F's invocation (a
  module's ``attn_output`` or a model's ``inputs_embeds``). A name re-bound before F returns frees its value
  earlier; the stacks do not say which name a value had, so the figure may hold a value longer than eager.

An invocation is the run of consecutive rows whose stacks share the frames down to it and whose module
path (the scope) stays within the invocation's module: two calls of one block from a loop (``for block in
self.h``) share their call stack but not their scope. :func:`holds` gives, per row, the row after which its
result may be freed at the earliest (None: no reference beyond its last use is seen; rows without a call
stack, as from a JAX program, get none).
"""
from __future__ import annotations

def _tagged(stack: tuple, scope: str) -> tuple:
    """The frames with the module path each runs in: a module's ``forward`` frame opens the next scope
    segment (the outermost one, the model's own, none), so two calls of one block from a loop differ."""
    seg = scope.split("/") if scope else []
    out, m = [], -1
    for f in stack:
        if f[0].endswith(".forward"):
            m += 1
        out.append(f + ("/".join(seg[:max(m, 0)]),))
    return tuple(out)


def _common(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _fn(f: tuple) -> tuple:
    return f[0], f[1], f[4]


def _frame_key(f: tuple, n: int) -> tuple:
    """The function of a frame (``n`` 3) or the statement in it (``n`` 4: its line too)."""
    return (f[0], f[1], f[4], f[2])[:n]


def _dtype(r) -> str:
    t = r.result
    return "" if isinstance(t, tuple) else getattr(t, "dtype", "")


def holds(rows, producers) -> list:
    """Per row, the last row (program order) its result is referenced until, or None (see the module)."""
    stacks = [() if r.op.endswith(".constant") else  # hoisted: located at the program, not at a call
              _tagged(r.loc.stack, r.scope) for r in rows]
    out: list = [None] * len(rows)
    ends: dict = {}
    for i, ps in enumerate(producers):
        si = stacks[i]
        for q in ps:
            if not isinstance(q, int) or q >= i or not si or not stacks[q]:
                continue
            sq = stacks[q]
            d = _common(sq, si)
            if d == 0 or d >= len(sq) or d >= len(si) or _fn(sq[d]) != _fn(si[d]):
                continue  # F (frame d) must be one function both calls are made in
            end = i
            if sq[d][2] != si[d][2]:  # another statement of F: a name, held until F returns ...
                stmt = _end(stacks, i, si[:d], _fn(si[d]) + (si[d][2],), ends)
                rebound = rows[stmt].shape == rows[q].shape and _dtype(rows[stmt]) == _dtype(rows[q])
                # ... unless the statement reading it makes a value like it (``x = f(x)``: the name re-bound)
                end = stmt if rebound else _end(stacks, i, si[:d], _fn(si[d]), ends)
            elif len(si) > d + 1:  # an argument of the call F makes: held until that call returns
                end = _end(stacks, i, si[:d + 1], (), ends)
            if end > i and (out[q] is None or end > out[q]):
                out[q] = end
    return out


def _end(stacks, start: int, head: tuple, fn: tuple, memo: dict) -> int:
    """The last row of the run from ``start`` whose stacks begin with ``head`` and then (where ``fn`` is
    given) a frame of that function (:func:`_fn`: one invocation) or of that statement (:func:`_frame_key`
    with its line)."""
    key = (start, head, fn)
    hit = memo.get(key)
    if hit is not None:
        return hit
    j, n, d = start, len(stacks), len(head)
    while j + 1 < n:
        s = stacks[j + 1]
        if s:  # rows without a stack stay in the run
            if len(s) < d + (1 if fn else 0) or s[:d] != head or (fn and _frame_key(s[d], len(fn)) != fn):
                break
        j += 1
    memo[key] = j
    return j


def extend(sw, ps, hold: list) -> None:
    """Move the frees of the entry frame's values (pass ``ps``, rows from 0) to after the rows ``hold`` names:
    a value (through its views: a view's reference keeps its storage) is freed no earlier than that."""
    seq, rows = ps.p.seq, ps.p.fr.rows
    at = {}  # table row -> the item position of the frame running it
    for idx, e in enumerate(seq):
        if type(e) is int:
            at[e] = idx
        elif hasattr(e, "end"):
            for j in range(e.start, e.end):
                at[j] = idx
    want: dict = {}
    for e, h in enumerate(hold):
        if h is None or e >= len(rows) or not rows[e].values or h not in at:
            continue
        for k in rows[e].values[1]:
            r = sw.root(k)
            if want.get(r, -1) < at[h]:
                want[r] = at[h]
    for r, idx in want.items():
        b = ps.sizes.get(r)
        if not b:
            continue
        cur = ps.last.get(r)
        if cur is None or cur >= idx:
            continue
        ps.freed[cur] -= b
        ps.freed[idx] += b
        ps.last[r] = idx

"""How long PyTorch eager keeps a value: until its last Python reference dies, not at its last use.

A torch program lowered through torchax or torch-xla carries, per op, the Python call stack of the framework
call that made it: a chain of call sites, each a function name and the source position of the call made in
it. Eager PyTorch frees a tensor when nothing references it any more; from the stacks two references can be
told apart from a temporary that dies at the end of its statement:

* **an argument**: a value read by a call made in frame F (the deepest frame the producer's and the reader's
  stacks share) is referenced by F's call expression until that call returns: it lives until the last op of
  the callee's invocation (a block's input lives while the block runs, although its last reader is the first
  norm; a loop's block reads the previous trip's output as its argument);
* **a name**: a value made by one statement of F and read by another statement of F was bound to a name (or
  stored in an object) in between: it lives until F returns, i.e. until the last op of F's invocation (a
  module's ``attn_output`` or a model's ``inputs_embeds``). A name re-bound before F returns frees its value
  earlier; the stacks do not say which name a value had, so the figure may hold a value longer than eager.
  A statement re-binds the name it reads where it makes a value of its shape and dtype (``x = f(x)``), a view
  of it (``x = x.unflatten(...)``), or runs again at once reading its own value (``h = block(h)`` in a loop);
  the value is then freed when that statement's run ends (its last row with a stack: a constant hoisted
  into it does not end it; a loop's next trip, the same call on another module, does). A statement that
  makes a value like it is not taken to re-bind the name where a later statement reads the value still.

A value made by frames the stacks do not show (a library helper) and read by a function that helper calls
is that call's argument: held until the call returns. The ops of a function the IR calls (``func.call``:
``torch.clamp``, an embedding's ``take``, a mask's ``where``) carry the callee's locations without a stack:
they are taken to run in the statement of the row with a stack before them, and a hold of a value the callee
returns holds the call's result.

An invocation is the run of consecutive rows whose stacks share the frames down to it and whose module
path (the scope) stays within the invocation's module: two calls of one block from a loop (``for block in
self.h``) share their call stack but not their scope. :func:`holds` gives, per row, the row after which its
result may be freed at the earliest (None: no reference beyond its last use is seen; rows without a call
stack, as from a JAX program, get none).
"""
from __future__ import annotations

from ..walk.row import short_name
from .opclass import ALIAS_OPS

#: Ops that PyTorch eager runs as views of their operand's storage (and the IR's re-labellings).
VIEWS = ALIAS_OPS | {"transpose", "slice", "broadcast_in_dim", "broadcast"}


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


def _rebinds(rows, producers, stmt: int, q: int) -> bool:
    """Whether the statement ending at row ``stmt`` re-binds the name of row ``q``'s value, as far as the IR
    tells: it makes a value like it (``x = f(x)``), or a view of it (``x = x.unflatten(...)``: whatever the
    name, the view keeps the storage alive as long as it is referenced itself)."""
    a, b = rows[stmt], rows[q]
    if a.shape == b.shape and _dtype(a) == _dtype(b):
        return True
    j = stmt
    while j > q and short_name(rows[j].op) in VIEWS:
        ps = [p for p in producers[j] if isinstance(p, int)]
        if len(ps) != 1:
            return False
        j = ps[0]
    return j == q and j != stmt


def holds(rows, producers) -> list:
    """Per row, the last row (program order) its result is referenced until, or None (see the module)."""
    stacks = _borrowed([() if r.op.endswith(".constant") else  # hoisted: located at the program, not at a call
                        _tagged(r.loc.stack, r.scope) for r in rows], rows)
    out: list = [None] * len(rows)
    ends: dict = {}
    last = [-1] * len(rows)  # per row, its value's last reader
    for i, ps in enumerate(producers):
        for q in ps:
            if isinstance(q, int) and q < i:
                last[q] = i
    for i, ps in enumerate(producers):
        if not stacks[i]:
            continue
        for q in ps:
            if not isinstance(q, int) or q >= i or not stacks[q]:
                continue
            end = _held(rows, producers, stacks, ends, q, i, last[q])
            if end > i and (out[q] is None or end > out[q]):
                out[q] = end
    return out


def _borrowed(stacks: list, rows) -> list:
    """``stacks`` with the rows of a called function (a ``func.call`` of the IR: a framework call lowered as
    one, ``torch.clamp``, an embedding's ``take``, a mask's ``where``) given a stack: the callee's ops carry
    their own locations, without the call's; they run in the statement of the row with a stack before them
    (the first rows: after them), which is the statement that made the call."""
    out, prev = list(stacks), None
    for j, r in enumerate(rows):
        if stacks[j]:
            prev = stacks[j]
        elif prev is not None and not r.op.endswith(".constant"):
            out[j] = prev
    first = next((s for s in stacks if s), ())
    for j, r in enumerate(rows):
        if stacks[j]:
            break
        if not r.op.endswith(".constant"):
            out[j] = first
    return out


def _held(rows, producers, stacks, ends: dict, q: int, i: int, last: int) -> int:
    """The last row row ``q``'s value is referenced until, as row ``i`` reads it (``i``: no reference seen);
    ``last``: the value's last reader."""
    sq, si = stacks[q], stacks[i]
    d = _common(sq, si)
    if d == len(sq) and len(si) > d:  # made by the statement (frames the stacks do not show: a library's
        return _end(stacks, i, si[:d], _fn(si[d]), ends)  # helper) whose call reads it: an argument
    if d == 0 or d >= len(sq) or d >= len(si):
        return i
    if _fn(sq[d]) != _fn(si[d]):
        if sq[d][:2] == si[d][:2]:  # one function on two modules from one statement (``h = block(h)`` in a
            return _end(stacks, i, si[:d], _fn(si[d]), ends)  # loop): an argument until the call returns
        return i  # F (frame d) must be one function both calls are made in
    if sq[d][2] != si[d][2]:  # another statement of F: a name, held until F returns ...
        key = _fn(si[d]) + (si[d][2],)
        stmt = _end(stacks, i, si[:d], key, ends)
        # ... unless the statement reading it re-binds the name (``x = f(x)``, ``h = block(h)`` in a loop;
        # not where a later statement reads the value still: ``y = f(x)`` then ``z = g(x)``)
        if (last <= stmt and _rebinds(rows, producers, stmt, q)
                or _carried(producers, stacks, ends, stmt, si[:d], key)):
            return stmt
        return _end(stacks, i, si[:d], _fn(si[d]), ends)
    if len(si) > d + 1:  # an argument of the call F makes: held until that call returns
        return _end(stacks, i, si[:d + 1], (), ends)
    return i


def _carried(producers, stacks, ends: dict, stmt: int, head: tuple, key: tuple) -> bool:
    """Whether the statement (``key``, in the frame under ``head``) whose run ends at row ``stmt`` runs again
    at once and its next run reads this run's value: a loop's ``h = block(h)``, which re-binds its name."""
    memo = ("carried", stmt, head, key)
    hit = ends.get(memo)
    if hit is None:
        n, j = len(stacks), stmt + 1
        while j < n and not stacks[j]:
            j += 1
        s, d = stacks[j] if j < n else (), len(head)
        hit = ends[memo] = (len(s) > d and s[:d] == head and _frame_key(s[d], len(key)) == key and
                            any(stmt in producers[k] for k in range(j, _end(stacks, j, head, key, ends) + 1)))
    return hit


def _end(stacks, start: int, head: tuple, fn: tuple, memo: dict) -> int:
    """The last row of the run from ``start`` whose stacks begin with ``head`` and then (where ``fn`` is
    given) a frame of that function (:func:`_fn`: one invocation) or of that statement (:func:`_frame_key`
    with its line). Rows without a stack (constants hoisted to the program) inside the run do not break it,
    but the run ends at its last row with one: a statement ``x = f(x)`` followed by a hoisted constant still
    ends at the op that makes its value, so the re-binding is seen."""
    key = (start, head, fn)
    hit = memo.get(key)
    if hit is not None:
        return hit
    j, last, n, d = start, start, len(stacks), len(head)
    call = _call(stacks[start], d) if len(fn) == 4 else None
    while j + 1 < n:
        j += 1
        s = stacks[j]
        if not s:  # rows without a stack (hoisted constants) stay in the run but do not end it
            continue
        if len(s) < d + (1 if fn else 0) or s[:d] != head or (fn and _frame_key(s[d], len(fn)) != fn):
            break
        if call is not None and _again(call, s, d):
            break
        last = j
    memo[key] = last
    return last


def _call(s: tuple, d: int) -> tuple | None:
    """The call a statement (frame ``d`` of stack ``s``) is running: the call expression's column, and the
    function called with the module it runs in; None where the row runs in the statement's own frame."""
    if len(s) <= d + 1:
        return None
    f = s[d + 1]
    return s[d][3], f[0], f[1], f[4]


def _again(call: tuple, s: tuple, d: int) -> bool:
    """Whether stack ``s`` runs the call expression of ``call`` again on another module: the next trip of a
    loop (``for block in self.blocks: h = block(h)``), a new execution of the statement."""
    if len(s) <= d + 1:
        return False
    f = s[d + 1]
    return s[d][3] == call[0] and f[0] == call[1] and f[1] == call[2] and f[4] != call[3]


def extend(sw, ps, hold: list) -> None:
    """Move the frees of the entry frame's values (pass ``ps``, rows from 0) to after the rows ``hold`` names:
    a value (through its views: a view's reference keeps its storage) is freed no earlier than that."""
    seq, rows = ps.p.seq, ps.p.fr.rows
    at = {}  # table row -> the item position of the frame running it
    calls = {}  # table row -> the results of the function call running it
    for idx, e in enumerate(seq):
        if type(e) is int:
            at[e] = idx
        elif hasattr(e, "end"):
            for j in range(e.start, e.end):
                at[j] = idx
                if e.name == "call":
                    calls[j] = e.defs
    want: dict = {}
    for e, h in enumerate(hold):
        if h is None or e >= len(rows) or h not in at:
            continue
        for k in (rows[e].values[1] if rows[e].values else calls.get(e, ())):
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


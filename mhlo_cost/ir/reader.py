"""The MLIR reader: jaxlib's parser behind one call, run in a child process by :mod:`mhlo_cost.ir.guard`
(the child's loop is :mod:`mhlo_cost.cli.child`) and importable for its context.

jaxlib's bytecode reader trusts its input: one flipped byte can make it abort or crash the process
(SIGABRT, SIGSEGV), and a hostile text file can make the StableHLO parser allocate without end. So the
input is parsed in a child with bounded memory and time, which hands back either MLIR bytecode written by
MLIR itself (which the parent then parses, fast and safely), the walk's analysis, or one error line.

This file imports only jaxlib, the standard library, :mod:`mhlo_cost.ir.bindings` (jaxlib's) and the answer
codes (:mod:`mhlo_cost.ir.codes`): the child starts in a fraction of a second, and the package's walk sits above
it, not beside it.
"""
from __future__ import annotations

import io
import re

from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext

from .bindings import chlo, mhlo, sdy, stablehlo
from .codes import Answer


def make_context(handler: bool = True) -> ir.Context:
    """An MLIR context with func, the upstream dialects jaxlib ships, StableHLO, MHLO, CHLO and Shardy.

    With ``handler``, diagnostics are swallowed (they reach callers as MLIRError), so nothing is printed on
    stderr behind the caller's back."""
    ctx = ir.Context()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    if handler:
        ctx.attach_diagnostic_handler(lambda diagnostic: True)
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    sdy.register_dialect(ctx)
    return ctx


def first_line(text: str) -> str:
    return " ".join(text.strip().split("\n")[0].split())


def diagnostic_message(err: ir.MLIRError, name: str) -> str:
    """``name:line:col: message`` from the first error diagnostic MLIR attached."""
    diags = list(getattr(err, "error_diagnostics", []) or [])
    if not diags:
        return f"{name}: {first_line(str(err))}"
    d = diags[0]
    where = name
    try:
        loc = ir.FileLineColLoc(d.location)  # raises unless it is a file:line:col location
        where = f"{name}:{loc.start_line}:{loc.start_col}"
    except (ValueError, TypeError):
        pass
    return f"{where}: {_plain(first_line(d.message))}"


def _plain(message: str) -> str:
    """MLIR's advice for unregistered dialects names options a user of mhlo-cost does not have."""
    if "created with unregistered dialect" in message or "unregistered operation" in message:
        head = message.split(". If this is intended")[0]
        if "quant" in head:
            return (f"{head}: quantized types (!quant.uniform) need MLIR's quant dialect, which jaxlib "
                    "does not include, so mhlo-cost cannot read this program")
        return f"{head} (a dialect that mhlo-cost's MLIR, jaxlib's, does not include)"
    return message


def _single_module(op: ir.Operation):
    """The operation to hand back: the module, or the one module nested in it (``module { module {...} }``)."""
    while True:
        ops = [o.operation for o in op.regions[0].blocks[0].operations]
        inner = [o for o in ops if o.name == "builtin.module"]
        if any(o.name == "func.func" for o in ops) or not inner:
            return op, None
        if len(inner) > 1:
            names = [str(o.attributes["sym_name"]) if "sym_name" in o.attributes else "(unnamed)" for o in inner]
            return None, (f"{len(inner)} modules in one file ({', '.join(names)}); mhlo-cost analyses one "
                          "module: write each to its own file")
        op = inner[0]


def parse(kind: str, data: bytes, name: str, ctx: ir.Context):
    """(module, the module operation to analyse, None) or (None, None, message)."""
    try:
        if kind == "vhlo":
            module = stablehlo.deserialize_portable_artifact(ctx, data)
        else:
            with ctx:
                module = ir.Module.parse(data)
    except ir.MLIRError as e:
        return None, None, diagnostic_message(e, name)
    except (MemoryError, Exception) as e:  # bad bytes inside a message, a reader's own exceptions
        text = first_line(str(e)) or type(e).__name__
        if isinstance(e, MemoryError) or "bad_alloc" in text:
            text = "the MLIR reader ran out of memory on this input: truncated, corrupt or hostile data"
        return None, None, f"{name}: {text}"
    try:
        if _HIGH_ESCAPE.search(data if kind == "text" else _printed(module.operation)):
            clean_locations(module.operation)
    except RecursionError:
        return None, None, f"{name}: locations nested too deeply to read"
    op, message = _single_module(module.operation)
    return (module, op, None) if op is not None else (None, None, f"{name}: {message}")


# -- locations whose strings are not UTF-8 ---------------------------------------------------------------
#
# MLIR strings are bytes; a location name written with hex escapes (``loc("caf\E9/x")``) or a flipped byte
# in bytecode is not UTF-8, and jaxlib's ``NameLoc.name_str`` then aborts the whole process (a C++
# exception nanobind cannot turn into a Python one). So every location that names such a string is
# rewritten here, before the bytecode for the parent is written, with U+FFFD for the bad bytes: the parent
# reads every location name safely, and none is dropped. The bytes themselves are read without ever
# making a Python str of them: the location is printed (MLIR escapes every byte past ASCII) and MLIR
# parses the printed string literal back into a StringAttr, whose ``value_bytes`` is safe.

#: A hex escape of a byte past ASCII (``\E9``): the only way MLIR text (read as UTF-8) gives a string that
#: is not UTF-8. Input without one (text as given, bytecode as MLIR prints it) skips the walk below.
_HIGH_ESCAPE = re.compile(rb"\\[89a-fA-F][0-9a-fA-F]")


def _printed(op: ir.Operation) -> bytes:
    """``op`` as generic MLIR text with its locations (MLIR escapes every byte past ASCII in a string), large
    constants elided: a fast first look for escapes before walking every location (bytecode input)."""
    buf = io.BytesIO()
    op.print(large_elements_limit=16, large_resource_limit=16, enable_debug_info=True, print_generic_op_form=True,
             assume_verified=True, file=buf, binary=True)
    return buf.getvalue()


def clean_locations(op: ir.Operation) -> int:
    """Rewrite, under ``op``, every op and block-argument location that holds a string which is not UTF-8
    (its bad bytes as U+FFFD); the number of distinct locations rewritten."""
    fixer = _LocationFixer()

    def visit(o):
        new = fixer.fix(o.location)
        if new is not None:
            o.location = new
        for region in o.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = fixer.fix(arg.location)
                    if new is not None:
                        arg.set_location(new)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return fixer.count


class _LocationFixer:
    def __init__(self):
        self.memo: dict = {}
        self.count = 0

    def fix(self, loc: ir.Location):
        """A location like ``loc`` whose strings are UTF-8, or None where ``loc`` is so already."""
        key = loc.attr
        if key in self.memo:
            return self.memo[key]
        new = self._rebuild(loc, loc.typeid, loc.context)
        self.memo[key] = new
        self.count += new is not None
        return new

    def _rebuild(self, loc: ir.Location, tid, ctx):
        if tid == _NAME:
            child = ir.NameLoc(loc).child_loc
            raw, new_child = _first_string(loc), self.fix(child)
            if new_child is None and _is_utf8(raw):
                return None
            return ir.Location.name(_text(raw), childLoc=child if new_child is None else new_child, context=ctx)
        if tid == _FILE:
            raw = _first_string(loc)
            if _is_utf8(raw):
                return None
            f = ir.FileLineColLoc(loc)
            return ir.Location.file(_text(raw), f.start_line, f.start_col, f.end_line, f.end_col, context=ctx)
        if tid == _CALLSITE:
            c = ir.CallSiteLoc(loc)
            callee, caller = c.callee, c.caller
            new_callee, new_caller = self.fix(callee), self.fix(caller)
            if new_callee is None and new_caller is None:
                return None
            return ir.Location.callsite(callee if new_callee is None else new_callee,
                                        [caller if new_caller is None else new_caller], context=ctx)
        if tid == _FUSED:
            f = ir.FusedLoc(loc)
            parts = list(f.locations)
            fixed = [self.fix(p) for p in parts]
            if all(x is None for x in fixed):
                return None
            return ir.Location.fused([p if x is None else x for p, x in zip(parts, fixed)], f.metadata, context=ctx)
        return None  # unknown and opaque locations hold no string the walk reads


def _first_string(loc: ir.Location) -> bytes:
    """The bytes of the first string literal of a name or file location (its name or file name)."""
    printed = str(loc.attr)  # ``loc("name"...)``; a quote inside the string is printed as \22, never \"
    start = printed.index('"')
    literal = printed[start:printed.index('"', start + 1) + 1]
    if "\\" not in literal:
        return literal[1:-1].encode()
    return ir.StringAttr(ir.Attribute.parse(literal, loc.context)).value_bytes


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


_NAME = ir.NameLoc.static_typeid
_FILE = ir.FileLineColLoc.static_typeid
_CALLSITE = ir.CallSiteLoc.static_typeid
_FUSED = ir.FusedLoc.static_typeid


def limit_memory(extra: int) -> None:
    """Address space: what the process maps now plus ``extra`` bytes (Linux; elsewhere no limit)."""
    try:
        import os
        import resource

        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        soft = mapped + extra
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (ImportError, ValueError, OSError):
        pass


def limit_cpu(seconds: float) -> None:
    """CPU time: what the process has used so far plus ``seconds`` (rounded up to a whole second, the limit's
    unit), after which the kernel stops it (SIGXCPU; no core file is written). POSIX; elsewhere no limit."""
    try:
        import math
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime) + max(1, math.ceil(seconds))
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):
        pass


def parsed(kind: str, data: bytes, name: str):
    """The module and its one top-level module op, or ``(None, answer)``: :attr:`Answer.READ_ERROR` and a
    message, or :attr:`Answer.OUT_OF_MEMORY` and a message (restart the child)."""
    module, op, message = parse(kind, data, name, _one_thread(make_context(handler=False)))
    if op is None:
        code = Answer.OUT_OF_MEMORY if "ran out of memory" in message else Answer.READ_ERROR
        return None, code + message.encode("utf-8", "replace")
    return module, op


def _one_thread(ctx: ir.Context) -> ir.Context:
    """``ctx`` with MLIR's multithreading off, for the reader's child: its parse and the verify after it run on one
    thread whatever the setting (a program is one function, or few), and with it on every type and attribute the
    parser makes (each op's location, each type) is uniqued through the context's thread-safe path: 10% of the
    parse on the 400-layer benchmark, 20% at 10^5 ops (benchmarks/bench_analyze.py, bench_scaling.py). The child
    walks on one thread too."""
    ctx.enable_multithreading(False)
    return ctx


def bytecode(op: ir.Operation) -> bytes:
    """MLIR bytecode of ``op``, written by MLIR itself."""
    buf = io.BytesIO()
    op.write_bytecode(buf)
    return buf.getvalue()

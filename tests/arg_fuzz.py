"""Seeded argument vectors for ``serve``, ``train-plan``, ``lower`` and ``sweep`` (a spec with a ``[training]``
table), for issue 43: "every argument validated before work, in every command; never silently ignored".

A case is a small valid command (:mod:`fault_setups`' configurations) with one to three mutations from
different groups: values out of range, zero, negative, huge (10**12), non-integers, wrong types, duplicates,
contradictory combinations, unknown names, empty strings, odd unicode. Each mutation says what it expects:
``refuse`` (the argument cannot be honoured: exit 2 with one ``mhlo-cost: error:`` line; exit 0 is
"accepted-and-ignored") or ``any`` (exit 0 or such an exit 2). A case expects ``refuse`` where any of its
mutations does. Shared by ``tests/fault_cases.py`` (a few, fixed seed) and ``benchmarks/fuzz_args.py``.
"""
from __future__ import annotations

import json
import random
import shlex
from dataclasses import dataclass
from pathlib import Path

import fault_kit as fk
import fault_setups as fs
from fuzz_specs import sweep_case

HUGE = "1000000000000"
COMMANDS = ("serve", "train-plan", "lower", "sweep")


@dataclass(frozen=True)
class Case:
    command: str
    argv: tuple  # with {tmp} (the case's folder), {cache} (the command's shared cache), {file} (a regular file)
    expect: str  # "refuse" or "any"
    what: tuple  # the mutations, in words
    files: tuple = ()  # (name, text) written into {tmp} first

    def shown(self) -> str:
        text = "mhlo-cost " + shlex.join(self.argv)
        for name, body in self.files:
            text += f"  # {name}: {' | '.join(ln for ln in body.splitlines() if ln.strip())[:300]}"
        return text


# -- mutations: (group, function(rng, argv) -> (argv, expect, what)) -------------------------------------------


def with_opt(argv: list, name: str, value: str) -> list:
    """``argv`` with option ``name`` set to ``value`` (its old value replaced)."""
    out = list(argv)
    if name in out:
        i = out.index(name)
        del out[i:i + 2]
    if value.startswith("-") and name.startswith("--"):
        return out + [f"{name}={value}"]
    return out + [name, value]


def with_set(argv: list, key: str, value: str) -> list:
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--set" and i + 1 < len(argv) and argv[i + 1].split("=")[0] == key:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out + ["--set", f"{key}={value}"]


def opt(name: str, pool: list, group: str | None = None):
    def fn(rng, argv):
        value, expect = rng.choice(pool)
        return with_opt(argv, name, value), expect, f"{name} {value!r}"
    return group or name, fn


def setkv(key: str, pool: list, group: str | None = None):
    def fn(rng, argv):
        value, expect = rng.choice(pool)
        return with_set(argv, key, value), expect, f"--set {key}={value!r}"
    return group or f"set {key}", fn


def add(tokens: list, expect: str, why: str, group: str | None = None):
    def fn(rng, argv):
        return argv + list(tokens), expect, f"{' '.join(tokens)} ({why})"
    return group or tokens[0], fn


def ints(valid: list, huge: str = "any", extra: tuple = ()) -> list:
    """A positive whole number's values: valid ones, broken ones (refuse), odd but readable ones (any)."""
    pool = [(str(v), "any") for v in valid] * 3
    pool += [(v, "refuse") for v in ("0", "-1", "1.5", "abc", "", " ", "1e3", "0x10", "nan", "-0", "1,2", "\u200b2")]
    pool += [(v, "any") for v in ("\u0662", "\uff12", "+2", " 2 ")]  # Arabic-Indic 2, fullwidth 2: int() reads them
    pool += [(HUGE, huge), ("9" * 40, huge)]
    return pool + list(extra)


NAMES_BAD = [("nosuch", "refuse"), ("", "refuse"), ("h100\u200b", "refuse"), ("\u202eselene", "refuse"),
             ("x" * 5000, "refuse")]
DTYPES = [("f32", "any"), ("bf16", "any"), ("float16", "any"), ("int8", "any"), ("float64", "any"), ("bool", "any"),
          ("bogus", "refuse"), ("", "refuse"), ("f32\u200b", "refuse"), ("F32", "any")]


def _lists(valid: str, bad_tp: bool = False) -> list:
    pool = [(valid, "any"), (",".join([valid.split(",")[0]] * 2001), "any"),
            (",".join(str(i) for i in range(1, 2002)), "refuse"),  # 2,001 distinct points: past any sane limit
            ("", "refuse"), (",", "refuse"), ("1,-1", "refuse"), ("1,abc", "refuse"), ("0", "refuse"),
            (f"1,{HUGE}", "any"), ("1;2", "refuse"), ("1,,2", "any")]
    return pool + ([("1,3", "refuse"), ("4", "refuse")] if bad_tp else [])


SERVE_BASE = ["serve", "--model", "gpt", *fs.GPT_SET, "--context", "32", "--cache-dir", "{cache}", "-q"]
SERVE = [
    opt("--batch", ints([1, 2])), opt("--context", ints([32, 64])),
    opt("--tp", ints([1, 2], huge="refuse", extra=[("3", "refuse"), ("4", "refuse")]), group="shape"),
    opt("--batches", _lists("1,2")), opt("--contexts", _lists("32,64")),
    opt("--tps", _lists("1,2", bad_tp=True), group="shape"),
    setkv("layers", [("1", "any"), ("2", "any"), ("0", "refuse"), ("-1", "refuse"), (HUGE, "refuse"),
                     ("1.5", "refuse"), ("abc", "refuse"), ("", "refuse"), ("true", "refuse"), ("[1]", "refuse")]),
    setkv("heads", [("2", "any"), ("3", "refuse"), ("0", "refuse"), ("-2", "refuse"), ("2.0", "refuse")], "shape"),
    setkv("hidden", [("64", "any"), ("128", "any"), ("63", "refuse"), ("0", "refuse"), ("\"64\"", "refuse")], "shape"),
    setkv("vocab", [("128", "any"), ("0", "refuse"), ("-5", "refuse"), (HUGE, "any")]),
    setkv("mlp_ratio", [("2", "any"), ("0", "refuse")]),
    add(["--set", "batch=4"], "refuse", "GPTConfig.batch: serve's batch is --batch"),
    add(["--set", "scan=true"], "refuse", "the step lowers its layers unrolled whatever scan says"),
    add(["--dtype", "f32", "--set", "dtype=bfloat16"], "refuse", "two dtypes"),
    add(["--set", "nosuch=1"], "refuse", "unknown field"), add(["--set", "l\u00e4yers=1"], "refuse", "unknown field"),
    add(["--set", "layers"], "refuse", "no ="), add(["--set", "=1"], "refuse", "no key"),
    opt("--dtype", DTYPES),
    add(["--prefill"], "any", "prefill"), add(["--decode", "--prefill"], "refuse", "contradictory"),
    add(["--prefill", "--tokens", "64"], "refuse", "prompt longer than the cache"),
    add(["--tokens", "8"], "refuse", "decode makes one token"),
    add(["--plot", "{tmp}/p.png"], "refuse", "no sweep to plot", group="plot"),
    add(["--batches", "1,2", "--plot", "{tmp}/p.txt"], "any", "a plot named .txt", group="plot"),
    add(["--batches", "1,2", "--plot", ""], "refuse", "empty plot name", group="plot"),
    add(["--batches", "1,2", "--plot", "{tmp}"], "refuse", "plot into a folder", group="plot"),
    add(["-o", ""], "refuse", "empty output name", group="-o"), add(["-o", "{tmp}"], "refuse", "a folder", group="-o"),
    add(["--no-cache"], "refuse", "--cache-dir given too: one of them is ignored"),
    add(["--cache-dir", "{file}"], "refuse", "a file, not a folder"),
    opt("--hardware", [("a100", "any"), ("h200", "any"), ("dgx-h100", "any")] + NAMES_BAD),
    add(["--launch", "cuda-graphs"], "any", "valid"), opt("--format", [("json", "any"), ("csv", "any"),
                                                                        ("html", "refuse"), ("", "refuse")]),
    add(["--hf", "LlamaForCausalLM"], "refuse", "two models"),
    add(["--config", "llama"], "refuse", "gpt has no config"),
]


def hf_mutation():
    """--hf cases (the gpt's options removed): a class that is not one, a model type that is not one, a
    config.json that transformers rejects or that is not JSON, a layer count of 0."""
    def fn(rng, argv):
        kept, i = [], 0
        while i < len(argv):
            if argv[i] in ("--model", "--set", "--layers", "--hidden", "--heads", "--seq", "--vocab"):
                i += 2
                continue
            kept.append(argv[i])
            i += 1
        extra, why = rng.choice([
            (["--hf", "NoSuchForCausalLM"], "no such class"),
            (["--hf", "LlamaForCausalLM", "--config", "nosuchtype"], "no such model type"),
            (["--hf", "LlamaForCausalLM", "--config", "{tmp}/bad.json"], "a config transformers rejects"),
            (["--hf", "LlamaForCausalLM", "--config", "{tmp}/notjson.json"], "not JSON"),
            (["--hf", "LlamaForCausalLM", "--config", "llama", "--set", "num_hidden_layers=0"], "0 layers")])
        return kept[:1] + extra + kept[1:], "refuse", f"{' '.join(extra)} ({why})"
    return "model", fn


BAD_JSON = json.dumps({"model_type": "llama", "num_hidden_layers": -1, "hidden_size": 0, "num_attention_heads": 3,
                       "vocab_size": "many"})
HF_FILES = (("bad.json", BAD_JSON), ("notjson.json", "{num_hidden_layers: 2,"))

PLAN_BASE = fs.PLAN
PLAN = [
    opt("--layers", ints([2, 4], huge="refuse")),
    opt("--hidden", ints([64, 128], extra=[("63", "refuse")]), group="shape"),
    opt("--heads", ints([2, 4], extra=[("3", "refuse")]), group="shape"), opt("--seq", ints([32, 64])),
    opt("--vocab", ints([128, 256])),
    opt("-t", ints([1, 2], huge="refuse", extra=[("3", "refuse"), ("4", "refuse")]), group="shape"),
    opt("-p", ints([1, 2], huge="refuse", extra=[("3", "refuse")]), group="pipe"),
    opt("-d", ints([1], huge="refuse", extra=[("2", "refuse")])),  # global batch 1 over 2 replicas
    add(["--sp"], "refuse", "sequence parallelism with t = 1", group="shape"),
    add(["--interleave", "2"], "refuse", "interleaving with p = 1", group="pipe"),
    opt("--micro-batch", ints([1], extra=[("2", "refuse")]), group="batch"),
    opt("--global-batch", ints([1, 2, 4]), group="batch"),
    opt("--recompute", [("selective", "any"), ("full", "any"), ("bogus", "refuse"), ("", "refuse"),
                        ("FULL", "refuse")]),
    add(["--dp-comm", "zero"], "any", "valid"), add(["--dp-overlap"], "any", "valid"),
    opt("--sweep", [("2", "any"), ("0", "refuse"), ("-4", "refuse"), ("1099511627776", "refuse"), (HUGE, "refuse"),
                    ("2.5", "refuse")]),
    add(["--set", "num_hidden_layers=1"], "refuse", "--set without --hf"),
    add(["--config", "llama"], "refuse", "--config without --hf"),
    opt("--model", [("gpt-22b", "any"), ("nosuch", "refuse"), ("", "refuse"), ("GPT-22B", "any")], group="model"),
    opt("--hardware", [("dgx-a100", "any"), ("h100", "any")] + NAMES_BAD),
    add(["--cache-dir", "{file}"], "refuse", "a file, not a folder"),
    opt("--format", [("html", "any"), ("json", "any"), ("csv", "any"), ("pdf", "refuse")]),
    add(["--by", "stage"], "any", "valid"),
    add(["-o", ""], "refuse", "empty output name", group="-o"), add(["-o", "{tmp}"], "refuse", "a folder", group="-o"),
]

LOWER_BASE = [*fs.LOWER, "--layers", "1", "-o", "{tmp}/l.mlir"]
STEP_BASE = ["lower", "--model", "gpt", *fs.GPT_SET, "--decode", "--context", "32", "--batch", "1", "-q", "-o",
             "{tmp}/d.mlir"]
LOWER = [
    opt("--layers", ints([1, 2], huge="refuse")), opt("--heads", ints([2], extra=[("3", "refuse")]), group="shape"),
    opt("--hidden", ints([64], extra=[("63", "refuse")]), group="shape"), opt("--tokens", ints([16])),
    opt("--batch", ints([1, 2])), opt("--dtype", DTYPES),
    add(["--decode", "--train"], "refuse", "one step at a time", group="step"),
    add(["--prefill", "--train"], "refuse", "one step at a time", group="step"),
    add(["--decode", "--prefill"], "refuse", "contradictory", group="step"),
    add(["--context", "32"], "refuse", "--context without --decode / --prefill", group="step"),
    add(["--train"], "any", "valid", group="step"),
    add(["--remat", "block"], "refuse", "--remat without --train", group="step"),
    add(["--optimizer", "sgd"], "refuse", "--optimizer without --train", group="step"),
    add(["--loss", "xent"], "refuse", "--loss without --train", group="step"),
    add(["--devices", "4"], "refuse", "gpt has no parallel strategy"), add(["--parallel", "megatron"], "refuse", "gpt"),
    add(["--mesh", "2x2"], "refuse", "--mesh without 2d"), add(["--routing", "capacity:1.5"], "refuse", "no experts"),
    add(["--expert-parallel", "2"], "refuse", "no experts"), add(["--input", "2x16"], "refuse", "a bundled model"),
    add(["--kwarg", "a=1"], "refuse", "a bundled model"), add(["--set", "layers=2"], "refuse", "bundled: flags"),
    add(["--config", "llama"], "refuse", "a bundled model"), add(["--small"], "refuse", "stdit3 only"),
    add(["--shape", "16_64_64"], "refuse", "stdit3 only"), add(["--depth", "2"], "refuse", "stdit3 only"),
    add(["--scan"], "any", "valid"), add(["--no-locations"], "any", "valid"),
    add(["-o", ""], "refuse", "empty output name", group="-o"), add(["-o", "{tmp}"], "refuse", "a folder", group="-o"),
]
STEP = [
    opt("--batch", ints([1, 2])), opt("--context", ints([32, 64])), opt("--dtype", DTYPES),
    add(["--layers", "2"], "refuse", "the step's gpt is configured by --set"),
    add(["--hidden", "128"], "refuse", "the step's gpt is configured by --set"),
    add(["--tokens", "4"], "refuse", "decode makes one token"), add(["--train"], "refuse", "one step at a time"),
    add(["--prefill"], "refuse", "contradictory"),
    setkv("layers", [("2", "any"), ("0", "refuse"), ("-1", "refuse")]),
    setkv("heads", [("2", "any"), ("3", "refuse")]),
]

STDIT_BASE = ["lower", "--model", "stdit3", "--small", "-q", "-o", "{tmp}/s.mlir"]
STDIT = [
    opt("--dtype", DTYPES), opt("--depth", ints([1, 2], huge="refuse")), opt("--batch", ints([1, 2])),
    opt("--tokens", ints([8])),
    opt("--shape", [("16_64_64", "any"), ("bogus", "refuse"), ("0_0_0", "refuse"), ("", "refuse"), ("1_1_1", "any")]),
    add(["--parallel", "ulysses", "--devices", "2"], "any", "valid", group="par"),
    add(["--parallel", "2d", "--devices", "3"], "refuse", "2d on an odd count", group="par"),
    add(["--parallel", "megatron", "--devices", HUGE], "refuse", "10**12 devices", group="par"),
    add(["--devices", "2"], "refuse", "--devices without --parallel", group="par"),
    add(["--mesh", "2x2"], "refuse", "--mesh without 2d", group="par"),
    add(["--layers", "2"], "refuse", "gpt only"), add(["--scan"], "refuse", "gpt only"),
    add(["--decode"], "refuse", "stdit3 has no decode step"),
]

TABLES = {"serve": (SERVE_BASE, SERVE), "train-plan": (PLAN_BASE, PLAN), "lower": (LOWER_BASE, LOWER),
          "lower-step": (STEP_BASE, STEP), "lower-stdit3": (STDIT_BASE, STDIT)}


def _mutated(rng: random.Random, base: list, table: list, hf: bool) -> tuple:
    count = rng.choices((1, 2, 3), weights=(7, 2, 1))[0]
    pool = list(table) + ([hf_mutation()] if hf else [])
    argv, expects, whats, groups = list(base), [], [], set()
    for group, fn in rng.sample(pool, min(len(pool), count * 2)):
        if group in groups:
            continue
        groups.add(group)
        argv, expect, what = fn(rng, argv)
        expects.append(expect)
        whats.append(what)
        if len(whats) == count:
            break
    return argv, "refuse" if "refuse" in expects else "any", tuple(whats)


def generate(seed: int, n: int, commands=COMMANDS, hf: bool = True) -> list:
    """``n`` cases, the commands in turn, from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        cmd = commands[i % len(commands)]
        if cmd == "sweep":
            cases.append(sweep_case(rng))
            continue
        name = cmd if cmd != "lower" else rng.choices(("lower", "lower-step", "lower-stdit3"), (6, 3, 1))[0]
        base, table = TABLES[name]
        argv, expect, what = _mutated(rng, base, table, hf and cmd in ("serve", "train-plan") and rng.random() < 0.05)
        files = HF_FILES if "--hf" in argv else ()
        cases.append(Case(cmd, tuple(argv), expect, what, files))
    return cases


# -- running a case ---------------------------------------------------------------------------------------------


class Runner:
    """Runs cases under ``root``: one ledger, one cache per command (accepted cases are cheap), a folder per case."""

    def __init__(self, root: Path, timeout: float = 60.0, fork: bool | None = None):
        self.root, self.timeout, self.fork = Path(root), timeout, fork
        self.env = fk.run_env(self.root / "state", self.root / "cache-home")
        self.file = self.root / "a-file"
        self.root.mkdir(parents=True, exist_ok=True)
        self.file.write_text("a regular file\n")
        self._n = 0

    def run(self, case: Case) -> tuple:
        """(class, outcome): :func:`fault_kit.classify`, or accepted-and-ignored."""
        import shutil

        self._n += 1
        tmp = self.root / "cases" / str(self._n)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name, text in case.files:
            (tmp / name).write_text(text)
        values = {"tmp": tmp, "cache": self.root / "cache" / case.command, "file": self.file}
        argv = [a.replace("{tmp}", str(tmp)).replace("{cache}", str(values["cache"])).replace("{file}", str(self.file))
                for a in case.argv]
        o = fk.run(argv, tmp, self.env, tmp / "logs", timeout=self.timeout, fork=self.fork)
        shutil.rmtree(tmp, ignore_errors=True)
        c = fk.classify(o)
        if c == "ok" and case.expect == "refuse":
            c = "accepted-and-ignored"
        return c, o

"""Dialect-mixing programs for the fuzz suite (issue 24): StableHLO work inside the loops, launches and branches of
affine, scf and gpu, with tensor / gpu ops no rule knows and Shardy all_gathers among them.

Each program comes with its closed form: the vector FLOPs and communication bytes a correct count gives, and
whether some loop cannot be counted (then the count may be lower, but a warning must say so). A program whose
count differs from its closed form with no warning and no unknown row is a silent count.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

ADD_FLOPS = 8  # stablehlo.add of tensor<8xf32>
GATHER_BYTES = 24  # sdy.all_gather of a 32-byte f32[8] over an axis of 4: (4-1)/4 x 32
CONSTANTS = (0, 1, 2, 3, 4, 5, 7, 8, 10)

HEADER = """module {
sdy.mesh @mesh = <["x"=4]>
func.func @main(%x: tensor<8xf32>, %xs: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
                %n: index, %i: index, %b: i1, %v: f32, %u: tensor<1xf32>, %idx: tensor<1x1xindex>) -> tensor<8xf32> {
""" + "".join(f"  %c{k} = arith.constant {k} : index\n" for k in CONSTANTS)
FOOTER = "  return %x : tensor<8xf32>\n}\n}\n"


@dataclass
class Program:
    text: str
    vector_flops: int  # the closed form, loops that cannot be counted taken once
    comm_bytes: int
    uncountable: bool  # some loop's trips are not static: a warning is due
    unknown: bool  # some op no rule knows runs: an unknown row is due


class _Gen:
    def __init__(self, rng: random.Random):
        self.rng, self.flops, self.comm, self.uncountable, self.unknown, self.k = rng, 0, 0, False, False, 0

    def name(self) -> str:
        self.k += 1
        return f"%v{self.k}"

    def leaf(self, mult: int, pad: str) -> str:
        r = self.rng.random()
        if r < 0.6:
            self.flops += ADD_FLOPS * mult
            return f"{pad}{self.name()} = stablehlo.add %x, %x : tensor<8xf32>\n"
        if r < 0.75:
            self.comm += GATHER_BYTES * mult
            return f'{pad}{self.name()} = sdy.all_gather [{{"x"}}] %xs out_sharding=<@mesh, [{{}}]> : tensor<8xf32>\n'
        self.unknown = self.unknown or mult > 0  # an op that runs 0 times leaves no row
        if r < 0.85:
            return f"{pad}{self.name()} = tensor.empty() : tensor<4xf32>\n"
        return (f"{pad}{self.name()} = tensor.scatter %u into %x[%idx] scatter_dims([0]) unique : "
                "(tensor<1xf32>, tensor<8xf32>, tensor<1x1xindex>) -> tensor<8xf32>\n")

    def block(self, mult: int, depth: int, pad: str) -> str:
        return "".join(self.stmt(mult, depth, pad) for _ in range(self.rng.randint(1, 3)))

    def stmt(self, mult: int, depth: int, pad: str) -> str:
        rng = self.rng
        if depth >= 3 or rng.random() < 0.35:
            return self.leaf(mult, pad)
        kind = rng.choice(("affine.for", "affine.parallel", "scf.for", "scf.parallel", "scf.forall", "gpu.launch",
                           "scf.if", "scf.index_switch", "scf.execute_region", "scf.while", "affine.for.dyn"))
        lo, hi, st = rng.choice(CONSTANTS), rng.choice(CONSTANTS), rng.choice((1, 2, 3))
        trips = max(0, -((lo - hi) // st))
        inner = pad + "  "
        iv = f"%i{depth}_{self.k}"
        if kind == "affine.for":
            return f"{pad}affine.for {iv} = {lo} to {hi} step {st} {{\n{self.block(mult * trips, depth + 1, inner)}{pad}}}\n"
        if kind == "affine.for.dyn":
            self.uncountable = True
            return f"{pad}affine.for {iv} = 0 to %n {{\n{self.block(mult, depth + 1, inner)}{pad}}}\n"
        if kind == "affine.parallel":
            return f"{pad}affine.parallel ({iv}) = ({lo}) to ({hi}) step ({st}) {{\n" \
                   f"{self.block(mult * trips, depth + 1, inner)}{pad}}}\n"
        if kind == "scf.for":
            st = 1
            trips = max(0, hi - lo)
            return f"{pad}scf.for {iv} = %c{lo} to %c{hi} step %c{st} {{\n{self.block(mult * trips, depth + 1, inner)}{pad}}}\n"
        if kind == "scf.parallel":
            st, trips = 1, max(0, hi - lo)
            return f"{pad}scf.parallel ({iv}) = (%c{lo}) to (%c{hi}) step (%c{st}) {{\n" \
                   f"{self.block(mult * trips, depth + 1, inner)}{inner}scf.reduce\n{pad}}}\n"
        if kind == "scf.forall":
            return f"{pad}scf.forall ({iv}) in ({hi}) {{\n{self.block(mult * hi, depth + 1, inner)}{pad}}}\n"
        if kind == "gpu.launch":
            g, t = rng.choice(CONSTANTS), rng.choice(CONSTANTS)
            s = f"{iv}"
            return (f"{pad}gpu.launch blocks({s}a, {s}b, {s}c) in ({s}d = %c{g}, {s}e = %c1, {s}f = %c1) "
                    f"threads({s}g, {s}h, {s}j) in ({s}k = %c{t}, {s}l = %c1, {s}m = %c1) {{\n"
                    f"{self.block(mult * g * t, depth + 1, inner)}{inner}gpu.terminator\n{pad}}}\n")
        if kind == "scf.if":
            return f"{pad}scf.if %b {{\n{self.block(mult, depth + 1, inner)}{pad}}}\n"
        if kind == "scf.index_switch":
            return (f"{pad}scf.index_switch %i\n{pad}case 0 {{\n{self.block(mult, depth + 1, inner)}{inner}scf.yield\n"
                    f"{pad}}}\n{pad}default {{\n{inner}scf.yield\n{pad}}}\n")
        if kind == "scf.execute_region":
            return f"{pad}scf.execute_region {{\n{self.block(mult, depth + 1, inner)}{inner}scf.yield\n{pad}}}\n"
        self.uncountable = True  # scf.while
        return (f"{pad}scf.while : () -> () {{\n{inner}scf.condition(%b)\n{pad}}} do {{\n"
                f"{self.block(mult, depth + 1, inner)}{inner}scf.yield\n{pad}}}\n")


def program(seed: int) -> Program:
    """One dialect-mixing program and its closed form, from ``seed``."""
    g = _Gen(random.Random(seed))
    body = g.block(1, 0, "  ")
    return Program(HEADER + body + FOOTER, g.flops, g.comm, g.uncountable, g.unknown)

"""``mhlo-cost rules``: the op -> rule table (every op a rule counts, its table, kind, rule function and what the
rule counts), in the shared formats."""
from __future__ import annotations

from .common import EXIT_OK, add_force, add_quiet, claim_output, regex, write_output

#: The rule tables (mhlo_cost.walk.registry.TABLES' names), listed here so that --help imports no jaxlib.
TABLE_NAMES = ("matrix", "vector", "linalg", "collective", "shardy", "custom_call")


def cmd_rules(args, console) -> int:
    from ..views.render import render
    from ..views.rules import rules_table

    claim_output(args, console)
    table = rules_table(op=args.op, table=args.table)
    write_output(render(table, args.format, wide=True), args.output)  # the summary is what the table is for
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("rules", help="list the op rules: which rule counts each op, and how",
                       description="List every op a rule counts (dialect-qualified), with its rule table, the row's "
                                   "kind, the rule function and the first sentence of its docstring. Control flow "
                                   "(calls, loops, branches) is the walk's own and not listed.")
    p.add_argument("--op", metavar="REGEX", type=regex, help="only ops whose name matches (re.search)")
    p.add_argument("--table", choices=TABLE_NAMES, help="only this table's rules")
    p.add_argument("--format", choices=("table", "csv", "json", "markdown"), default="table")
    p.add_argument("-o", "--output", metavar="OUT", help="write to a file instead of stdout")
    add_force(p)
    add_quiet(p)
    p.set_defaults(func=cmd_rules)

"""Helpers of the HTML report tests: small models to report on, and a reader of the page's tables."""
from __future__ import annotations

import csv
import io
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dump(out: Path, *extra: str) -> Path:
    """A bundled model lowered by scripts/dump_mhlo.py (``--model stdit3 --small`` and ``extra``)."""
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "dump_mhlo.py"), "--model", "stdit3", "--small",
                        *extra, "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


class PageReader(HTMLParser):
    """Every tag's attributes, and the cells (``data-v``, text) of each table by id, by section."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.tables: dict[str, dict[str, list]] = {}
        self._table = None
        self._part = None
        self._row = None
        self._cell = None
        self._depth = 0  # nested tables (inside templates) are not the page's own

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._depth += 1
            if self._depth == 1 and a.get("id"):
                self._table = self.tables.setdefault(a["id"], {"head": [], "body": [], "foot": []})
        elif self._table is not None and self._depth == 1:
            if tag in ("thead", "tbody", "tfoot"):
                self._part = {"thead": "head", "tbody": "body", "tfoot": "foot"}[tag]
            elif tag == "tr":
                self._row = {"attrs": a, "cells": []}
            elif tag in ("td", "th"):
                self._cell = {"attrs": a, "text": ""}

    def handle_endtag(self, tag):
        if tag == "table":
            self._depth -= 1
            if self._depth == 0:
                self._table = None
        elif self._table is not None and self._depth == 1:
            if tag in ("td", "th") and self._cell is not None:
                self._row["cells"].append(self._cell)
                self._cell = None
            elif tag == "tr" and self._row is not None:
                self._table[self._part].append(self._row)
                self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def read_page(text: str) -> PageReader:
    r = PageReader()
    r.feed(text)
    r.close()
    return r


def header_names(table: dict) -> list[str]:
    """Column names of a page table (the header cell's text without its unit)."""
    out = []
    for th in table["head"][0]["cells"]:
        out.append(th["attrs"]["title"].removeprefix("sort by "))
    return out


def csv_rows(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def same_value(page: str, csv_text: str) -> bool:
    """A page's exact value equals the CSV's: integers digit for digit, floats as the same float."""
    if page == csv_text:
        return True
    try:
        return float(page) == float(csv_text) and not (page.lstrip("-").isdigit() and csv_text.lstrip("-").isdigit())
    except ValueError:
        return False

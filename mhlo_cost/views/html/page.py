"""The document around the sections: one HTML file with its style and script inline, nothing fetched.

A Content-Security-Policy in the page itself forbids every network load, so a page that opens at all opens
complete, offline. Nothing in it depends on the time or on chance: the same input, the same bytes.
"""
from __future__ import annotations

from importlib import resources

from ... import __version__
from .fmt import esc

#: The browser may load nothing: inline style and script only, pictures only as data: URLs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def section(sid: str, title: str, body: str, note: str = "") -> str:
    """One titled part of the page, with an anchor (``#sid``) for the contents line."""
    if not body:
        return ""
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>{note_html}{body}</section>\n'


def document(title: str, header: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole file. ``sections`` are (id, title, html) in page order; those with no html are left out
    of the page and of its contents line."""
    present = [(sid, t, body) for sid, t, body in sections if body]
    nav = " · ".join(f'<a href="#{esc(sid)}">{esc(t)}</a>' for sid, t, _ in present)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="mhlo-cost {esc(__version__)}">\n'
        f"<title>{esc(title)}</title>\n<style>\n{asset('report.css')}</style>\n</head>\n<body>\n"
        f"{header}\n<nav>{nav}</nav>\n<main>\n" + "".join(body for _, _, body in present)
        + f'</main>\n<div id="tip" role="tooltip" hidden></div>\n<script>\n{asset("report.js")}</script>\n'
        "</body>\n</html>\n"
    )


def cards(items: list[tuple[str, str, str]]) -> str:
    """Headline figures: (label, rounded text, exact text on hover)."""
    return '<div class="cards">' + "".join(
        f'<div class="card" title="{esc(exact)}"><div class="v">{esc(text)}</div><div class="k">{esc(label)}</div>'
        "</div>" for label, text, exact in items) + "</div>"


def header(title: str, subtitle: str, card_items: list[tuple[str, str, str]], facts: list[tuple[str, str]],
           conventions: str = "") -> str:
    """The top of the page: title, a line under it, the headline figures, then facts (name, html)."""
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
    conv = f'<p class="conv">{conventions}</p>' if conventions else ""
    return (f'<header><h1>{esc(title)}</h1><p class="sub">{subtitle}</p>{cards(card_items)}'
            f'<dl class="facts">{dl}</dl>{conv}</header>')

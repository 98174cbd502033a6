"""Render a `Document` as one self-contained HTML file and as Markdown.

The HTML embeds every figure as a base64 PNG and sorts tables with a few lines of inline JS
(templates/report.html), so it opens offline from a mail attachment: no CDN, no sibling files.
"""

from __future__ import annotations

import base64
import html
import math
import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from reports.document import Block, Bullets, Document, Figure, Paragraph, SortedText, Table
from scaling.console import yes_no


def fmt(value: Any) -> str:
    """One number format for every table: 4 significant digits (a float from 1e4 to 1e6 whole, its 5 or 6 digits),
    scientific outside [1e-3, 1e6); a bool as 'yes' or 'no' (`scaling.console.yes_no`)."""
    if value is None:
        return "—"
    if isinstance(value, bool):  # (a diagnostics table's `exact`, `holds`: the words `scaling diagnose` prints)
        return yes_no(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}"
        if abs(value) >= 1e4:  # '.4g' is scientific from 1e4 (16384 read 1.638e+04); no comma: intervals use commas
            return f"{value:.0f}"
        return f"{value:.4g}"
    return str(value)


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


# --- names in the report's text ------------------------------------------------------------------

# What Markdown (and `_inline`) would read as markup in a line, and no more, so report.md stays readable as
# text: an underscore inside a word (ratio_per_decade) opens no emphasis, nor a '<' that starts no tag (p < 0.05).
# '$' too: GitHub's Markdown, where a committed report.md is read, sets '$m$' as math (an italic m).
# An '&' that begins a character reference ('&amp;', '&#32;') too: CommonMark shows the character it names.
MARKUP = re.compile(r"([\\`*\[\]|~$]|<(?=[A-Za-z/!?])|&(?=#[0-9]+;|#[xX][0-9a-fA-F]+;|[A-Za-z][A-Za-z0-9]*;)"
                    r"|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash-escaped ASCII punctuation character (CommonMark)
# What `plain` reads back: a backslash escape, or a decimal character reference `literal` wrote for a space or tab.
ESCAPED_OR_REFERENCE = re.compile(r"\\([!-/:-@\[-`{-~])|&#([0-9]+);")


# What begins a block where a line begins (CommonMark), and no more: a heading ('# x'), a quote ('> x'), a list item
# ('- x', '+ x', '1. x', '2) x'), a thematic break ('---', '- - -') or a heading's underline ('==='), after any
# indentation. Matched up to the character to escape: the marker's first, an ordered item's '.' or ')' after its
# number. ('*' and '_' are MARKUP's everywhere; '1.5x' or '-x' begin no block and stay as they are.)
BLOCK_START = re.compile(r"^[ \t]*(?:\d{1,9}(?=[.)](?:[ \t]|$))"
                         r"|(?=#{1,6}(?:[ \t]|$)|>|[-+](?:[ \t]|$)|(?:-[ \t]*){3,}$|=+[ \t]*$))", re.M)


LINE_BREAK = re.compile(r"\r\n?|\n")
# The first space or tab of a text's leading whitespace and the last of its trailing whitespace: where a line begins,
# four spaces (or a tab) begin a code block, and after a list's or a caption's '*', one begins a list item or ends
# no emphasis ('*' + ' x' + '*'). No backslash escapes a space; a character reference is text, never indentation.
EDGE_SPACE = re.compile(r"^[ \t]|[ \t]$")


def literal(text: str) -> str:
    """`text` (a recipe's name, a title, a value of the user's table) set in the report's Markdown as it is: 'nv*fp4'
    or 'a__b' put in a sentence or in **bold** ended or began the bold in both the HTML and report.md, as markup; a
    list item or paragraph that began with a recipe '# x', '1. x', '- x' or '> x' was a heading, a list or a quote in
    report.md; a title or a table's value beginning with four spaces was a code block, and one holding a line break
    ended its table row or paragraph (a line break is set as a space, as HTML shows it)."""
    text = BLOCK_START.sub(lambda m: m[0] + "\\", MARKUP.sub(r"\\\1", LINE_BREAK.sub(" ", str(text))))
    return EDGE_SPACE.sub(lambda m: f"&#{ord(m[0])};", text)


def code(text: str) -> str:
    """`text` (a name, a path) as a Markdown code span, where backslash escapes would show as backslashes: its
    fence one backtick longer than its longest run of backticks, so 'a`b' is ``a`b`` and not a span ended at its
    backtick; padded with a space where CommonMark would strip one or join the text's backtick to the fence."""
    text = str(text)
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    spaced = text[:1] == text[-1:] == " " and text.strip(" ")
    pad = " " if text[:1] == "`" or text[-1:] == "`" or spaced else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plain(text: str) -> str:
    """The report's Markdown text as plain text (for the console and --json): no bold, no escapes."""
    return ESCAPED_OR_REFERENCE.sub(lambda m: m[1] if m[1] is not None else chr(int(m[2])), text.replace("**", ""))


# --- HTML ---------------------------------------------------------------------------------------


# Read left to right, as CommonMark does: a backslash escape, else a code span (a run of backticks closed by a
# run of the same length, taken whole), else a run of backticks that opens none (shown as it is), else a decimal
# character reference (`literal`'s for a leading or trailing space: HTML's own, kept as it is).
_ESCAPE_OR_CODE = re.compile(r"\\([!-/:-@\[-`{-~])|(`+)(?!`)(.+?)(?<!`)\2(?!`)|`+|(&#[0-9]+;)")


def _code_html(body: str) -> str:
    if body.startswith(" ") and body.endswith(" ") and body.strip(" "):  # `code`'s padding, not the text's
        body = body[1:-1]
    return f"<code>{html.escape(body)}</code>"


def _inline(text: str) -> str:
    """Escape, then allow the two bits of markup the builder uses: **bold** and `code` (spans as `code` writes
    them; inside one a backslash is itself). A character escaped by `literal` and each code span are set aside
    as numbered placeholders first, so neither is read as bold."""
    held: list[str] = []

    def hold(m: re.Match) -> str:
        if m[1] is None and m[2] is None and m[4] is None:
            return m[0]  # backticks that open no span: text (escaped below)
        held.append(f"&#{ord(m[1])};" if m[1] is not None else m[4] if m[4] is not None else _code_html(m[3]))
        return f"\0{len(held) - 1}\0"

    out = html.escape(_ESCAPE_OR_CODE.sub(hold, text))
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub("\0(\\d+)\0", lambda m: held[int(m[1])], out)


def _sort_key(value: Any) -> str:
    """A number's data-sort attribute, written as JavaScript's parseFloat reads it: Python's 'inf' is NaN there
    (an interval open at one end sorted as no number), 'Infinity' is not. A `SortedText` cell sorts as its number."""
    if isinstance(value, SortedText):
        value = value.sort
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        key = ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else repr(value)
        return f' data-sort="{key}"'
    return ""


# A cell read as a number: one, or an interval as `build` writes it ("[0.68, 0.76]", "0.64 [0.58, 0.70]").
_INTERVAL = re.compile(r"^(\S+ )?\[[^,\[\]]+,[^,\[\]]+\]$")


def _numeric(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or bool(_INTERVAL.match(str(value)))


LONG_TEXT = 24  # a text column with a cell longer than this (a note) is given room to wrap in lines, not in words


def _column_kinds(table: Table) -> list[str]:
    """For each column of `table`: "" for numbers, "text" for text, i.e. the first column (the row's name) and any
    column with no number or interval in it (a verdict, a tensor's name; one whose every cell reads "not identified"
    too: nothing in it to line up), "text long" for text with long cells (a note), which got one word per line."""
    kinds = []
    for i in range(len(table.columns)):
        if i and any(_numeric(row[i]) for row in table.rows):
            kinds.append("")
        else:
            kinds.append("text long" if max((len(fmt(row[i])) for row in table.rows), default=0) > LONG_TEXT else "text")
    return kinds


def _html_cell(value: Any, kind: str) -> str:
    """A table cell. A number stays on one line; an estimate with its interval ("0.64 [0.58, 0.70]") breaks, where the
    column is narrow, only before its bracket: wrapped at every space it read "[0.58," over "0.70]"."""
    text = fmt(value)
    estimate = None if kind else re.fullmatch(r"(\S+) (\[[^\[\]]+\])", text)
    if estimate:
        return (f'<td class="ci"{_sort_key(value)}>{html.escape(estimate[1])} '
                f"<span>{html.escape(estimate[2])}</span></td>")
    return f"<td{kind}{_sort_key(value)}>{html.escape(text)}</td>"


def png_width(png: bytes) -> int:
    """A PNG's width in pixels, from its header (the IHDR chunk, first after the 8-byte signature)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return int.from_bytes(png[16:20], "big")


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_inline(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        # a text column (a name, a verdict, a note) is set left and wraps; a number or an interval stays on its line
        kinds = [f' class="{kind}"' if kind else "" for kind in _column_kinds(block)]
        head = "".join(f"<th{k}>{html.escape(c)}</th>" for k, c in zip(kinds, block.columns))
        body = "".join("<tr>" + "".join(_html_cell(v, k) for k, v in zip(kinds, row)) + "</tr>" for row in block.rows)
        # the caption outside the scrolling box: inside the table it was as wide as the table, so on a phone each of
        # its lines had to be scrolled sideways to be read
        caption = f"<figcaption>{_inline(block.caption)}</figcaption>" if block.caption else ""
        return (f'<figure class="table">{caption}<div class="scroll"><table class="sortable"><thead><tr>{head}</tr>'
                f"</thead><tbody>{body}</tbody></table></div></figure>")
    if isinstance(block, Figure):
        png = Path(block.path).read_bytes()
        data = base64.b64encode(png).decode("ascii")
        # the image in a box of its own that scrolls sideways, its pixel width for the stylesheet's minimum (templates/
        # report.html): shrunk to a phone's width, the three-panel loss figure's tick labels were 4-5 px tall
        return (
            f'<figure><div class="scroll"><img alt="{html.escape(Path(block.path).stem)}" '
            f'style="--width: {png_width(png)}px" src="data:image/png;base64,{data}"></div>'
            f"<figcaption>{_inline(block.caption)}</figcaption></figure>"
        )
    raise TypeError(f"unknown block {type(block).__name__}")


def to_html(doc: Document) -> str:
    template = Template(resources.files("reports").joinpath("templates/report.html").read_text())
    toc = "".join(f'<li><a href="#{_anchor(s.title)}">{html.escape(s.title)}</a></li>' for s in doc.sections)
    body = "".join(
        f'<section id="{_anchor(s.title)}"><h2>{html.escape(s.title)}</h2>'
        + "".join(_html_block(b) for b in s.blocks)
        + "</section>"
        for s in doc.sections
    )
    return template.substitute(
        title=html.escape(doc.title), subtitle=_inline(doc.subtitle), toc=toc, body=body
    )


# --- Markdown -----------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    return literal(fmt(value))  # a table's cells are data (a recipe's name), never markup


def _md_block(block: Block, out_dir: Path) -> str:
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {i}" for i in block.items)
    if isinstance(block, Table):
        lines = [f"*{block.caption}*", ""] if block.caption else []
        lines.append("| " + " | ".join(_md_cell(c) for c in block.columns) + " |")
        lines.append("|" + "|".join("---" for _ in block.columns) + "|")
        lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
        return "\n".join(lines)
    if isinstance(block, Figure):
        rel = Path(block.path).relative_to(out_dir).as_posix()
        return f"![{Path(block.path).stem}]({rel})\n\n*{block.caption}*"
    raise TypeError(f"unknown block {type(block).__name__}")


def to_markdown(doc: Document, out_dir: Path) -> str:
    parts = [f"# {literal(doc.title)}", doc.subtitle]  # plain text, as the HTML's (a sweep's or a file's name)
    for s in doc.sections:
        parts.append(f"## {s.title}")
        parts += [_md_block(b, out_dir) for b in s.blocks]
    return "\n\n".join(parts) + "\n"

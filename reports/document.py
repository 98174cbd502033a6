"""The report as data: sections of paragraphs, tables and figures.

`build` assembles one `Document`; `render.py` writes it as HTML and as Markdown, so the two outputs
always say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


class SortedText(str):
    """A table cell's text that sorts as a number, `sort`, in the HTML's sortable tables (render's data-sort): '< 0.0001'
    as the p below the floor it stands for. Plain text sorts after every number, which put the strongest evidence
    last. It is the text everywhere else (Markdown, a terminal's table, ==)."""

    sort: float

    def __new__(cls, text: str, sort: float) -> "SortedText":
        cell = super().__new__(cls, text)
        cell.sort = sort
        return cell


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    path: Path  # the PNG on disk, under <out>/figures/
    caption: str


Block = Union[Paragraph, Bullets, Table, Figure]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    omitted: str = ""  # why the data cannot support this section ("" when it is there)

    def add(self, block: Block) -> "Section":
        self.blocks.append(block)
        return self

    def omit(self, why: str) -> "Section":
        """Keep the section in the report, saying in one paragraph why it is empty."""
        self.omitted = why
        return self.add(Paragraph(why))


@dataclass
class Document:
    title: str
    subtitle: str
    sections: list[Section] = field(default_factory=list)

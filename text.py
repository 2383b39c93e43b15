"""What the CLI prints for a person: hostile strings escaped, tables fitted to the terminal.

Every string read from the log is treated as hostile: a model name a client sent, a
provider name from an old config, a stream name from an older log may hold an escape
sequence that recolours or rewrites the terminal, a ``\\r`` that overprints a line, a
``\\n`` that forges a row, or a bidi override (U+202E) that shows text reversed.

:func:`printable` escapes every such character the way Python's ``repr`` does
(``\\x1b``, ``\\r``, ``\\u202e``) before anything reaches a terminal; the text tables and
the ``events``/``replay`` lines pass every string from the log through it. ``--json``
and ``--csv`` stay exact (JSON escapes these characters losslessly, see
:func:`json_safe`).

:func:`render_table` lays a table out in the terminal's width (:func:`terminal_width`:
``$COLUMNS``, else the terminal's, else 80 when stdout is not a terminal). Columns have a
rank: they are kept most important first until one does not fit, which is left out with
every one after it (:meth:`Table.text` names them under the table). Numbers and times are
never cut; a long name is cut with an ellipsis rather than wrapped. The layout (display
widths of wide characters, the ellipsis, alignment) is rich's, imported only when a table
is printed so the CLI starts as fast as before for everything else.
"""

import re
import shutil
import textwrap
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Column", "Table", "json_safe", "printable", "render_table", "terminal_width"]

#: Categories that must not reach a terminal raw: controls (C0, DEL, C1), format
#: characters (bidi overrides and isolates, zero-width characters), line and paragraph
#: separators, lone surrogates (which cannot even be encoded).
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_NOT_ASCII_PRINTABLE = re.compile("[^\x00-\x7e]")
_FLOOR = 12  # a name column is never cut below this (or its header's width)


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every control, format or separator character escaped (``\\x1b``)."""
    if text.isprintable():  # the common case: nothing to look at character by character
        return text
    return "".join(
        _escape(c) if unicodedata.category(c) in _UNSAFE else c for c in text
    )


def json_safe(text: str) -> str:
    """JSON text with the characters a terminal would act on written as ``\\uXXXX``.

    The decoded values are unchanged: only characters JSON allows raw are rewritten.
    """
    if text.isascii() and "\x7f" not in text:
        return text
    return _NOT_ASCII_PRINTABLE.sub(_json_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if unicodedata.category(char) not in _UNSAFE:
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells it as a surrogate pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def terminal_width() -> int:
    """Columns to fit: ``$COLUMNS``, else the terminal's width, else 80 (not a terminal)."""
    return shutil.get_terminal_size((80, 24)).columns


@dataclass(frozen=True)
class Column:
    """A column: its header, its rank (0 is kept first) and whether it may be cut.

    ``fixed`` columns (numbers, times, statuses) are shown whole or not at all; the
    others (names) may be cut with an ellipsis, down to 12 cells or their header.
    ``right`` aligns the column to the right (numbers).
    """

    header: str
    rank: int
    fixed: bool = True
    right: bool = False


@dataclass(frozen=True)
class Table:
    """A rendered table: its lines (no trailing blanks), its width, the headers left out."""

    lines: list[str]
    width: int
    hidden: list[str]

    def text(self, width: int, *, rule_before_last: bool = False) -> str:
        """The table, with a rule above its last row if asked, and a note on what is hidden."""
        lines = list(self.lines)
        if rule_before_last and len(lines) > 2:
            lines.insert(-1, "-" * self.width)
        if self.hidden:
            note = (f"(not shown at {width} columns: {', '.join(self.hidden)}; "
                    "a wider terminal or --json shows them)")
            lines += textwrap.wrap(note, width=max(width, 20))
        return "\n".join(lines)


def _fit(columns: Sequence[Column], natural: list[int], width: int) -> dict[int, int]:
    """The width of each shown column, by index; the others do not fit in ``width``."""
    from rich.cells import cell_len

    need = [n if c.fixed else min(n, max(cell_len(c.header), _FLOOR))
            for c, n in zip(columns, natural, strict=True)]
    chosen: list[int] = []
    used = -2
    for i in sorted(range(len(columns)), key=lambda i: columns[i].rank):
        # Strictly by rank: the first column always shows, and the first that does not
        # fit ends the choice (a narrower, less important one never takes the room a
        # more important name needs; the room left goes to the names cut so far).
        if chosen and used + 2 + need[i] > width:
            break
        chosen.append(i)
        used += 2 + need[i]
    widths = {i: need[i] for i in chosen}
    spare = width - used
    growing = [i for i in chosen if widths[i] < natural[i]]
    while spare > 0 and growing:
        # Give the room to the narrowest cut column first, one cell at a time.
        i = min(growing, key=lambda i: (widths[i], columns[i].rank))
        widths[i] += 1
        spare -= 1
        if widths[i] == natural[i]:
            growing.remove(i)
    return widths


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[str]],
                 width: int) -> Table:
    """Lay ``rows`` out under ``columns`` within ``width`` cells; cells are escaped here."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    cells = [[printable(c) for c in row] for row in rows]
    natural = [max([cell_len(col.header)] + [cell_len(r[i]) for r in cells])
               for i, col in enumerate(columns)]
    widths = _fit(columns, natural, width)
    shown = sorted(widths)
    table = RichTable(box=None, show_edge=False, pad_edge=False,
                      padding=(0, 1), header_style="", collapse_padding=False)
    for i in shown:
        col = columns[i]
        table.add_column(col.header, width=widths[i], no_wrap=True, overflow="ellipsis",
                         justify="right" if col.right else "left")
    for row in cells:
        table.add_row(*(Text(row[i]) for i in shown))
    total = sum(widths.values()) + 2 * (len(shown) - 1)
    console = Console(width=max(width, total), color_system=None, markup=False, emoji=False,
                      highlight=False, force_terminal=False, legacy_windows=False)
    with console.capture() as captured:
        console.print(table)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    hidden = [c.header for i, c in enumerate(columns) if i not in widths]
    return Table(lines, total, hidden)

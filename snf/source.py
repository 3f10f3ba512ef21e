"""Source text and spans: every IR node and every diagnostic points back here."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Span:
    """A region of a spec, 1-based lines and columns; end is exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"

    def to(self, other: "Span | None") -> "Span":
        """The span covering self through other."""
        if other is None:
            return self
        return Span(self.line, self.col, other.end_line, other.end_col)


NO_SPAN = Span(0, 0, 0, 0)


@dataclass(frozen=True)
class Source:
    """A spec's text, decoded, with the path it was read from (for messages only)."""

    path: str
    text: str
    sha256: str = field(default="")
    lines: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @staticmethod
    def from_bytes(path: str, data: bytes) -> "Source":
        digest = hashlib.sha256(data).hexdigest()
        # utf-8-sig drops a BOM; invalid bytes become U+FFFD so the lexer reports them in place.
        text = data.decode("utf-8-sig", errors="replace")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        return Source(path, text, digest, tuple(text.split("\n")))

    @staticmethod
    def from_text(path: str, text: str) -> "Source":
        return Source.from_bytes(path, text.encode("utf-8"))

    @staticmethod
    def read(path: str | Path) -> "Source":
        return Source.from_bytes(str(path), Path(path).read_bytes())

    def line(self, n: int) -> str:
        return self.lines[n - 1] if 1 <= n <= len(self.lines) else ""

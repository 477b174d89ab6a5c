"""Corpus files for indexing: the DPR ``psgs_w100.tsv`` dump (streamed) and JSON/JSONL."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.corpus import load_corpus
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.strict_json import not_utf8

DPR_HEADER = ("id", "text", "title")


def iter_dpr_tsv(path: str | Path) -> Iterator[Passage]:
    """Stream the DPR ``psgs_w100.tsv`` layout: a header ``id, text, title``, then one row each.

    Rows are read lazily, so the 21M-passage Wikipedia dump never sits in memory.
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError("corpus", f"file {file} does not exist",
                                "pass the path of psgs_w100.tsv or a JSON/JSONL corpus")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with file.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        try:
            yield from _dpr_rows(reader, file)
        except UnicodeDecodeError as exc:
            # Streamed: the file is decoded a block at a time, so the place is the row
            # after the last one read.
            raise not_utf8(f"{file}:{reader.line_num + 1}", exc) from None


def _dpr_rows(reader: Any, file: Path) -> Iterator[Passage]:
    header = next(reader, None)
    if header is None or tuple(h.strip().lower() for h in header[:3]) != DPR_HEADER:
        raise InvalidInputError(str(file), f"has header {header!r}, not id/text/title",
                                "use the DPR layout: a tab-separated header "
                                "'id<TAB>text<TAB>title'")
    for row in reader:
        if not row:
            continue
        if len(row) < 3 or not row[1].strip():
            raise InvalidInputError(f"{file}:{reader.line_num}",
                                    "is not an id/text/title row with a non-empty text",
                                    "fix or remove that line")
        yield Passage(id=row[0], text=row[1], title=row[2])


def read_corpus(path: str | Path) -> Iterator[Passage]:
    """Passages of a DPR ``.tsv`` file (streamed) or a JSON/JSONL ``{title, text}`` corpus."""
    file = Path(path)
    if file.suffix.lower() == ".tsv":
        return iter_dpr_tsv(file)
    return iter(load_corpus(file))


def count_rows(path: Path) -> int | None:
    """Passages in a DPR ``.tsv`` file (its lines less the header); None for other files."""
    if path.suffix.lower() != ".tsv":
        return None
    with path.open("rb") as fh:
        return max(0, sum(1 for _ in fh) - 1)

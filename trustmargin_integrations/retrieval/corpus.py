"""Corpus files: JSON (a list) or JSONL, one ``{title, text}`` record per passage."""

from __future__ import annotations

from pathlib import Path

from trustmargin_integrations import strict_json
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.schema import Passage


def _records(path: Path) -> list[object]:
    if strict_json.is_jsonl(path):
        return [strict_json.loads(line, f"{path}:{n}", "write one JSON object per line")
                for n, line in strict_json.lines(path)]
    data = strict_json.load_document(path, str(path),
                                     "give a JSON list of {title, text} objects or a .jsonl "
                                     "file")
    if isinstance(data, dict):
        data = data.get("passages", data.get("corpus", data.get("data")))
    if not isinstance(data, list):
        raise InvalidInputError(str(path), "holds no list of passages",
                                "give a JSON list of {title, text} objects")
    return data


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a corpus file into passages; ids default to the record's position."""
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError("corpus", f"file {file} does not exist",
                                "pass the path of a JSON or JSONL corpus file")
    passages = []
    for i, rec in enumerate(_records(file)):
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            raise InvalidInputError(f"{file}[{i}].text", "is missing or not a string",
                                    "give every record a 'text' string (and optionally 'title')")
        if not rec["text"].strip():
            raise InvalidInputError(f"{file}[{i}].text", "is empty",
                                    "remove empty passages from the corpus")
        title = rec.get("title") or ""
        if not isinstance(title, str):
            raise InvalidInputError(f"{file}[{i}].title", "is not a string", "use a text title")
        ident = rec.get("id", rec.get("_id", i))
        passages.append(Passage(id=str(ident), title=title, text=rec["text"]))
    if not passages:
        raise InvalidInputError(str(file), "holds no passages", "add at least one passage")
    return passages

"""Validation of one arbitration input: the one place that decides what a usable input is.

Every entry point (the Python API, ``trustmargin score``, the LangChain router, the LlamaIndex
query engine) ends up here. Adapters that call a field by another name (LangChain's
``documents``, LlamaIndex's ``rag.source_nodes``) pass ``names`` so that errors name the key
the user actually passed.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trustmargin_integrations.errors import InvalidInputError, typed_error
from trustmargin_integrations.schema import ArbitrationInput, Passage, PassageRef

FIELDS = tuple(ArbitrationInput.model_fields)

NamedText = tuple[str | None, str]
"""A RAG candidate after validation: its name (None when given as a bare text) and text."""


# Unicode's control characters (general category Cc) are exactly U+0000-U+001F and
# U+007F-U+009F, a set the standard's stability policy keeps fixed; tab and line feed stay.
# A regex over that set is about 30x faster than asking unicodedata per character (0.016 vs
# 0.47 ms on a 7,000-character context): a fifth of prepare() in a profile on a loaded
# machine, 0.5-1 ms of the 7-8 ms a 2k-token question takes on a quiet one.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> tuple[str, int]:
    """Remove control characters a tokenizer would mangle; return the text and the count."""
    return _CONTROLS.subn("", text)


@dataclass
class ValidInput:
    """A checked input: clean texts, the passages' identities and what was changed."""

    question: str
    passages: list[str]
    refs: list[PassageRef]
    direct_answer: str | None
    rag_answer: str | None
    id: str | None
    rag_candidates: list[NamedText] | None = None
    """Several RAG-side candidates as ``(name or None, text)``; None: the pairwise form."""
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    name: _Namer = field(default_factory=lambda: _Namer(None, None), repr=False)
    """How errors about this input name its fields (batch place, the caller's key names)."""


class _Namer:
    """Error field names: ``inputs[3].question`` in a batch, the adapter's own key names."""

    def __init__(self, where: str | None, names: Mapping[str, str] | None) -> None:
        self.where = where
        self.names = dict(names or {})

    def __call__(self, key: str, suffix: str = "") -> str:
        name = self.names.get(key, key) + suffix
        return f"{self.where}.{name}" if self.where else name


def validate_input(
    item: ArbitrationInput | Mapping[str, Any],
    *,
    where: str | None = None,
    names: Mapping[str, str] | None = None,
) -> ValidInput:
    """Check one input's types and content; return clean fields and the warnings to record.

    Args:
        item: an :class:`ArbitrationInput` or a mapping with its keys.
        where: the item's place in a batch (``inputs[3]``), prefixed to every error's field.
        names: how the caller calls our fields (``{"passages": "documents"}``).

    Raises:
        InvalidInputError: naming the field and the fix.
    """
    name = _Namer(where, names)
    if isinstance(item, ArbitrationInput):
        raw: Mapping[str, Any] = {k: getattr(item, k) for k in FIELDS}
    elif isinstance(item, Mapping):
        raw = item
    else:
        raise InvalidInputError(where or "input", f"is a {type(item).__name__}",
                                "pass an ArbitrationInput or a mapping with 'question' and "
                                "'passages'")
    unknown = sorted(str(k) for k in raw if k not in FIELDS)
    if unknown:
        raise InvalidInputError(name(unknown[0]), "is not a known field",
                                f"use only {list(FIELDS)}")
    warnings: list[str] = []
    question = check_question(raw.get("question"), name("question"), warnings)
    passages, refs = _passages(raw.get("passages"), name, warnings)
    answers = {}
    for key in ("direct_answer", "rag_answer"):
        answers[key] = _text(raw.get(key), name(key), warnings,
                             "pass the candidate's text, or None to generate it")
    candidates = _rag_candidates(raw.get("rag_candidates"), name, warnings)
    if candidates is not None and answers["rag_answer"] is not None:
        # A merge would have to invent a name and a place for rag_answer; refusing is clearer.
        raise InvalidInputError(name("rag_candidates"), "cannot be combined with rag_answer",
                                "put the rag_answer text into rag_candidates (e.g. first), or "
                                "pass only one of them")
    ident = raw.get("id")
    if (ident is not None and not isinstance(ident, (str, int))) or isinstance(ident, bool):
        raise InvalidInputError(name("id"), f"must be a string or an integer, got "
                                f"{type(ident).__name__}", "pass a short identifier, or none")
    if isinstance(ident, str):
        _encodable(ident, name("id"))
    return ValidInput(question=question, passages=passages, refs=refs,
                      direct_answer=answers["direct_answer"], rag_answer=answers["rag_answer"],
                      id=None if ident is None else str(ident), rag_candidates=candidates,
                      metadata=_metadata(raw.get("metadata"), name("metadata")),
                      warnings=warnings, name=name)


def _rag_candidates(value: Any, name: _Namer, warnings: list[str]) -> list[NamedText] | None:
    """Several RAG candidates: texts, ``(name, text)`` pairs, or a name -> text mapping.

    Errors name the candidate by its position (``rag_candidates[2]``) in every form, the
    same name the arbiter's warnings and window checks use.
    """
    if value is None:
        return None
    field_name = name("rag_candidates")
    if isinstance(value, Mapping):
        items: list[Any] = list(value.items())
        named = True
    elif isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidInputError(field_name, f"must be a list of candidate answers, got a "
                                f"{type(value).__name__}",
                                "pass a list of texts or (name, text) pairs, or a mapping "
                                "from name to text (wrap a single answer in a list)")
    else:
        items = list(value)
        named = False
    if not items:
        raise InvalidInputError(field_name, "is empty",
                                "pass at least one candidate, or leave rag_candidates out to "
                                "let the model generate one RAG answer")
    out: list[NamedText] = []
    seen: dict[str, int] = {}
    fix = "pass each candidate as a text or a (name, text) pair"
    for i, item in enumerate(items):
        where = name("rag_candidates", f"[{i}]")
        if named:
            label, text = item
        elif isinstance(item, str):
            label, text = None, item
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            label, text = item
        else:
            raise InvalidInputError(where, f"must be a string or a (name, text) pair, got "
                                    f"{_describe(item)}", fix)
        if named or label is not None:  # a mapping's key is always a name
            if not isinstance(label, str) or is_blank_text(label):
                raise InvalidInputError(where, f"has a name that is not a non-empty string "
                                        f"({label!r})", "name candidates like 'bm25' or "
                                        "'ircot'")
            _encodable(label, where)
            label = strip_controls(label)[0].strip()
            if label in seen:
                raise InvalidInputError(where, f"repeats the name {label!r} of "
                                        f"rag_candidates[{seen[label]}]",
                                        "give each candidate its own name")
            seen[label] = i
        checked = _text(text, where, warnings, fix)
        if checked is None:  # None means "generate" elsewhere; a listed candidate is given
            raise InvalidInputError(where, "has no text (None)",
                                    "pass the candidate's text (an empty string is a blank "
                                    "candidate that cannot win), or drop it from the list")
        out.append((label, checked))
    return out


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return "None" if value is None else type(value).__name__


def _passage_record(value: Mapping[str, Any], where: str) -> Passage:
    """A ``{text, title?, id?, score?}`` object (as JSON files carry passages)."""
    try:
        return Passage.model_validate({"id": "", **value})
    except ValidationError as exc:
        problem = exc.errors()[0]
        key = ".".join(str(x) for x in problem["loc"])
        raise InvalidInputError(f"{where}.{key}" if key else where, problem["msg"].lower(),
                                "give a passage object as {'text': str, 'title': str, "
                                "'id': str, 'score': number}") from None


def _metadata(value: Any, field_name: str) -> dict[str, Any]:
    """The caller's data as a JSON-safe copy (it is written into every Decision)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidInputError(field_name, "must be a mapping with string keys",
                                "pass a dict of JSON values, e.g. {'gold': 'Paris'}")
    try:
        text = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(field_name, f"holds a value JSON cannot carry ({exc})",
                                "keep metadata to strings, numbers, booleans, lists and "
                                "dicts") from exc
    _encodable(text, field_name)
    return json.loads(text)


def _encodable(value: str, field_name: str) -> None:
    """Refuse text that cannot be written as UTF-8 (a lone surrogate such as ``\\ud800``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(field_name, f"is not valid Unicode text ({exc.reason} at "
                                f"character {exc.start})",
                                "pass text that encodes as UTF-8 (no lone surrogates such as "
                                "\\ud800)") from None


class TypedFields:
    """Mixin for the pydantic models at an adapter's edge (LangChain retrievers, routers and
    models, LlamaIndex LLMs): a bad constructor argument is an :class:`InvalidInputError`
    naming it, as everywhere else in the package, not pydantic's ``ValidationError`` (which
    also wraps the InvalidInputError a field validator raises). Put it first in the bases.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().__init__(*args, **kwargs)
        except ValidationError as exc:
            raise typed_error(exc, f"pass a value of the documented type (see "
                                   f"{type(self).__name__}'s fields)") from None


def check_question(value: Any, field_name: str = "question",
                   warnings: list[str] | None = None) -> str:
    """A question: stripped, visible text (``warnings`` gets what was removed)."""
    text = _text(value, field_name, [] if warnings is None else warnings,
                 "pass the user's question as text")
    if text is None or is_blank_text(text):
        raise InvalidInputError(field_name, "is missing, empty or has no visible character",
                                "pass a non-empty question")
    return text


def check_items(value: Any, field_name: str, kind: type, *, what: str, empty_fix: str,
                item_fix: str) -> list[Any]:
    """``value`` as a list when it is a non-empty sequence (not a text) of ``kind`` objects;
    ``what`` names them in the errors, which name ``field_name`` or the first wrong item
    (``field_name[i]``) and give ``empty_fix`` or ``item_fix``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidInputError(field_name, f"must be a list of {what}, got a "
                                f"{type(value).__name__}", item_fix)
    if not value:
        raise InvalidInputError(field_name, "is empty", empty_fix)
    for index, item in enumerate(value):
        if not isinstance(item, kind):
            raise InvalidInputError(f"{field_name}[{index}]", f"is a {type(item).__name__}, "
                                    f"not a {kind.__name__}", item_fix)
    return list(value)


def check_retriever(value: Any, field_name: str = "retriever") -> Any:
    """A retriever: any object with a callable ``search(query, k)`` (returned unchanged)."""
    if not callable(getattr(value, "search", None)):
        raise InvalidInputError(field_name, f"a {type(value).__name__} has no "
                                "search(query, k) method",
                                "pass a BM25Index, an ElasticsearchRetriever or any object "
                                "with search(query, k) -> list[Passage]")
    return value


def check_k(value: Any, field_name: str = "k") -> int:
    """A passage count: a positive int (``bool`` is refused although it is an ``int``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(field_name, f"must be a positive integer, got {value!r}",
                                "ask for at least one passage")
    return value


# Characters that show nothing on their own: controls (Cc), format characters (Cf: zero-width
# space and joiners, direction marks, the BOM U+FEFF, soft hyphen) and separators (Zs, Zl, Zp:
# every space, including NBSP and the ideographic space, and the line/paragraph separators).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def check_queries(value: Any, field_name: str = "queries") -> list[str]:
    """A batch of search queries: a list of texts with a visible character each (a single
    string is refused, not searched character by character); errors name ``queries[i]``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidInputError(field_name, f"must be a list of query strings, got a "
                                f"{type(value).__name__}",
                                "pass a list of queries (wrap a single query in a list, or "
                                "call search)")
    for i, query in enumerate(value):
        if not isinstance(query, str) or is_blank_text(query):
            raise InvalidInputError(f"{field_name}[{i}]", "is empty or not a string",
                                    "pass a non-empty query string")
    return list(value)


def is_blank_text(text: str) -> bool:
    """True when ``text`` has no visible character: it is empty or holds only whitespace,
    separators (category Z), control (Cc) and format characters (Cf, e.g. U+200B zero-width
    space, U+FEFF). The one blank test for questions, passages, candidate names and the
    candidates the arbiter would score (``"\u200b"`` is as blank as ``""``)."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES
               for ch in text)


def _text(value: Any, field_name: str, warnings: list[str], fix: str) -> str | None:
    """A stripped text without control characters (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(field_name, f"must be a string, got {type(value).__name__}", fix)
    _encodable(value, field_name)
    value, removed = strip_controls(value)
    if removed:
        warnings.append(f"{field_name}: removed {removed} control character(s)")
    return value.strip()


def _passages(
    value: Any, name: _Namer, warnings: list[str]
) -> tuple[list[str], list[PassageRef]]:
    if value is None or isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        got = "nothing" if value is None else f"a {type(value).__name__}"
        raise InvalidInputError(name("passages"), f"must be a list of passages, got {got}",
                                "pass a list of passage texts or Passage records (wrap a "
                                "single passage in a list)")
    texts: list[str] = []
    refs: list[PassageRef] = []
    for i, p in enumerate(value):
        where = name("passages", f"[{i}]")
        if isinstance(p, Mapping) and "text" in p:
            p = _passage_record(p, where)
        if isinstance(p, Passage):
            ref = PassageRef(rank=i, id=p.id or None, title=p.title, score=p.score)
            p = p.as_context()
        elif isinstance(p, str):
            ref = PassageRef(rank=i)
        else:
            raise InvalidInputError(where, f"must be a string or Passage, got {type(p).__name__}",
                                    "pass passage texts (str), Passage records or "
                                    "{'text', 'title', 'id'} objects")
        text = _text(p, where, warnings, "pass passage texts (str) or Passage records")
        if is_blank_text(text):
            raise InvalidInputError(where, "is empty or whitespace",
                                    "drop empty passages before arbitration")
        texts.append(text)
        refs.append(ref)
    return texts, refs

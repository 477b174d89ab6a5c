"""LangChain ``Document`` <-> the core's :class:`~trustmargin_integrations.schema.Passage`."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.schema import Passage


def passage_to_document(passage: Passage) -> Document:
    """A project :class:`Passage` as a LangChain ``Document``.

    ``page_content`` is the passage text; ``metadata`` holds the passage's own metadata plus
    ``id``, ``title`` and ``score`` (the retriever's score).
    """
    return Document(page_content=passage.text, id=passage.id or None,
                    metadata={**passage.metadata, "id": passage.id, "title": passage.title,
                              "score": passage.score})


def document_to_passage(doc: Document) -> Passage:
    """A LangChain ``Document`` as the core's :class:`Passage` record.

    The id is ``doc.id``, else ``metadata["id"]``; the title and score come from
    ``metadata["title"]`` and ``metadata["score"]``. Scalar metadata is kept, so a
    ``passage_to_document`` round trip is lossless. The core formats the passage for the
    prompt with :meth:`Passage.as_context` (``title: text``), exactly as it formats the
    passages of its own retrievers.
    """
    meta = doc.metadata
    title = meta.get("title")
    score = meta.get("score")
    extra = {key: value for key, value in meta.items()
             if key not in ("id", "title", "score") and isinstance(key, str)
             and (value is None or isinstance(value, (str, int, float, bool)))}
    return Passage(
        id=str(doc.id or meta.get("id") or ""),
        text=doc.page_content,
        title="" if title is None else str(title),
        score=(float(score) if isinstance(score, (int, float)) and not isinstance(score, bool)
               else None),
        metadata=extra,
    )


def check_documents(value: Any, field: str) -> list[Document]:
    """``value`` when it is a list of ``Document`` objects (what a LangChain retriever
    returns); otherwise an error naming ``field`` and the first item that is not one."""
    if not isinstance(value, list):
        raise InvalidInputError(field, f"is a {type(value).__name__}, not a list of Documents",
                                "use a retriever that returns a list of Documents")
    for j, doc in enumerate(value):
        if not isinstance(doc, Document):
            raise InvalidInputError(f"{field}[{j}]", f"is a {type(doc).__name__}, not a "
                                    "Document", "use a retriever that returns Documents (wrap "
                                    "strings or tuples in Document(page_content=...))")
    return value

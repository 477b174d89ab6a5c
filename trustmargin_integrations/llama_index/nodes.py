"""Nodes and passages: LlamaIndex's ``NodeWithScore`` <-> the core's :class:`Passage`."""

from __future__ import annotations

import math
from typing import Any

from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from trustmargin_integrations.schema import Passage

__all__ = ["node_ref", "node_to_passage", "passage_to_node"]


def node_to_passage(node: NodeWithScore) -> Passage:
    """The core :class:`Passage` for a node: its id, text, ``title`` metadata and score.

    Only the text and the title enter the prompt (through ``Passage.as_context()``); other
    node metadata (file paths, page numbers) would only add noise for the scorer.
    """
    title = node.node.metadata.get("title")
    return Passage(id=node.node.node_id,
                   text=node.node.get_content(metadata_mode=MetadataMode.NONE),
                   title=title.strip() if isinstance(title, str) else "",
                   score=node.score)


def passage_to_node(passage: Passage) -> NodeWithScore:
    """A scored node for a project :class:`Passage` (the inverse of :func:`node_to_passage`).

    The node id is the passage id and ``metadata["title"]`` the title; the passage's other
    metadata is kept on the node but hidden from the LLM and the embedder, so a synthesizer
    prompts with ``title: ...`` and the text, as the core does.
    """
    metadata: dict[str, Any] = {**passage.metadata, "title": passage.title}
    hidden = [key for key in metadata if key != "title"]
    node = TextNode(id_=passage.id, text=passage.text, metadata=metadata,
                    excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=hidden)
    return NodeWithScore(node=node, score=passage.score)


def node_ref(node: NodeWithScore) -> dict[str, Any]:
    """What an audit record keeps of a node: id, title and score (the text is in the index).

    A non-finite score becomes None, so the record stays valid JSON.
    """
    title = node.node.metadata.get("title")
    score = node.score if node.score is None or math.isfinite(node.score) else None
    return {"id": node.node.node_id, "title": title if isinstance(title, str) else "",
            "score": score}

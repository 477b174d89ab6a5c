"""LocalLlamaIndexLLM as a LlamaIndex chat model on the real embedded SmolLM2-135M: whole answers,
token streaming, the chat template, the window guard, and a real RouterQueryEngine's selector.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    LocalLlamaIndexLLM,
    TrustMarginRetrieverQueryEngine,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Passage

LIST_PROMPT = "List three fruits, one per line."


@pytest.fixture(scope="module")
def llm(backend: Any) -> LocalLlamaIndexLLM:
    return LocalLlamaIndexLLM(backend=backend, max_new_tokens=40)


@pytest.fixture(scope="module")
def listed(llm: LocalLlamaIndexLLM) -> str:
    """The model's answer to a prompt whose answer has several lines (greedy: one run)."""
    return llm.complete(LIST_PROMPT).text


def test_answers_a_multi_line_prompt_in_full(llm: LocalLlamaIndexLLM, listed: str,
                                             backend: Any) -> None:
    assert llm.metadata.is_chat_model and llm.metadata.num_output == 40
    # Room for a synthesized answer.
    assert LocalLlamaIndexLLM(backend=backend).max_new_tokens == 256
    # The paper's candidates stop after the first answer line; a chat answer does not.
    first_line = backend.generate([backend.render_prompt(LIST_PROMPT)], 40,
                                  stop=answer_complete)[0]
    assert listed.count("\n") >= 2, listed
    assert listed.startswith(first_line.strip()) and len(listed) > len(first_line.strip())
    # It stopped because the model ended its turn, not at the token limit.
    assert len(backend.encode_answer(listed)) < llm.max_new_tokens


def test_streams_token_by_token(llm: LocalLlamaIndexLLM, listed: str) -> None:
    chunks = list(llm.stream_complete(LIST_PROMPT))
    assert len(chunks) > 3
    assert "".join(c.delta or "" for c in chunks) == listed == chunks[-1].text

    async def collect() -> list[str]:
        stream = await llm.astream_complete(LIST_PROMPT)
        return [c.delta or "" async for c in stream]

    deltas = asyncio.run(collect())
    assert len(deltas) > 3 and "".join(deltas) == listed


def test_chat_uses_the_models_chat_template(llm: LocalLlamaIndexLLM, backend: Any) -> None:
    messages = [ChatMessage(role=MessageRole.SYSTEM, content="You answer with one word."),
                ChatMessage(role=MessageRole.USER, content="Name a colour.")]
    rendered = llm.render_messages(messages)
    assert rendered == backend.tokenizer.apply_chat_template(
        [{"role": "system", "content": "You answer with one word."},
         {"role": "user", "content": "Name a colour."}], tokenize=False,
        add_generation_prompt=True)
    reply = llm.chat(messages)
    assert reply.message.role == MessageRole.ASSISTANT and reply.message.content
    assert "System:" not in reply.message.content  # not flattened into a transcript
    streamed = list(llm.stream_chat(messages))
    assert "".join(r.delta or "" for r in streamed) == reply.message.content
    assert streamed[-1].message.content == reply.message.content
    assert asyncio.run(llm.achat(messages)).message.content == reply.message.content


def test_refuses_a_prompt_over_the_context_window(llm: LocalLlamaIndexLLM) -> None:
    started = time.perf_counter()
    for call in (llm.complete, llm.stream_complete):
        with pytest.raises(InvalidInputError) as err:
            call("word " * 40_000)  # 200k characters: minutes of prefill if it were sent
        assert err.value.field == "prompt" and "context window" in err.value.problem
    assert time.perf_counter() - started < 60  # refused on the token count, not prefilled


def test_refuses_a_backend_without_a_local_model() -> None:
    with pytest.raises(InvalidInputError) as err:
        LocalLlamaIndexLLM(backend=object())
    assert err.value.field == "backend"


def test_drives_router_query_engines_selector(llm: LocalLlamaIndexLLM, tm: TrustMargin) -> None:
    index = BM25Index.build([
        Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
        Passage(id="bridge", title="Velmora Bridge",
                text="The Velmora Bridge was designed by the engineer Marta Okonkwo."),
    ])
    short = TrustMargin(tm.backend, TrustMarginConfig(max_new_tokens=8))
    tools = [
        QueryEngineTool.from_defaults(TrustMarginRetrieverQueryEngine(index, short),
                                      name="rivers", description="Questions about rivers."),
        QueryEngineTool.from_defaults(TrustMarginRetrieverQueryEngine(index, short),
                                      name="bridges", description="Questions about bridges."),
    ]
    # Room for the selector's whole JSON: the 135M model lists every tool with a reason
    # (about 60 tokens), which a first-line stop or a 48-token cut would leave unparsable.
    selector_llm = llm.model_copy(update={"max_new_tokens": 128})
    router = RouterQueryEngine(selector=LLMSingleSelector.from_defaults(llm=selector_llm),
                               query_engine_tools=tools, llm=llm)
    response = router.query("Which river flows through Quenby?")
    # The selector's JSON parsed into valid tool choices (which one the 135M model picks is
    # not asserted) and the router answered through them.
    selection = response.metadata["selector_result"]
    assert selection.selections and all(s.index in (0, 1) for s in selection.selections)
    assert response.response
    if len(selection.selections) == 1:  # one engine: its TrustMargin response, unchanged
        assert response.metadata[METADATA_KEY].answer == response.response

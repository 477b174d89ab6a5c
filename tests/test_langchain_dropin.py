"""The chains people write: TrustMargin inserted into LangChain's tutorial-shaped
RAG chain by one call, full chat answers, the local LLM and chat model, readable outputs.

Real parts throughout: the embedded SmolLM2 model (``tm``/``backend`` fixtures), a real BM25
index, real LangChain prompts, parsers and runnables. One chat model is scripted
(``GenericFakeChatModel``) where a test needs to know the answers in advance; it says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from operator import itemgetter
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import (
    DECISION_EVENT,
    LocalChatModel,
    LocalLLM,
    TrustMarginRetriever,
    TrustMarginRouter,
    build_trustmargin_chain,
    with_trustmargin,
)
from trustmargin_integrations.langchain.llms import render_messages
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.schema import Decision, Passage

QUESTION = "Who designed the Velmora Bridge?"
CORPUS = [
    Passage(id="velmora", title="Velmora Bridge",
            text="The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."),
    Passage(id="quenby", title="Quenby", text="The Zorblat river flows through Quenby."),
    Passage(id="orchard", title="Orchards", text="Apple orchards need cold winters to fruit."),
]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using the context. If the context is empty, answer from "
               "what you know.\n\nContext:\n{context}"),
    ("human", "{question}"),
])
RAG_TEXT = ("The Velmora Bridge was designed by the engineer Tomas Rilke.\n\nSome further "
            "details:\n- It crosses the river in Oststadt.\n- Rilke was a structural engineer.")
DIRECT_TEXT = "I believe it was Gustave Eiffel.\n\nHe designed many iron bridges."


def format_docs(docs: list[Document]) -> str:
    """The tutorial's formatter: page contents joined by blank lines."""
    return "\n\n".join(doc.page_content for doc in docs)


@pytest.fixture(scope="module")
def retriever() -> TrustMarginRetriever:
    return TrustMarginRetriever(retriever=BM25Index.build(CORPUS), k=1)


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, data))


class ScriptedChat(GenericFakeChatModel):
    """A scripted chat model: the answer depends on whether the prompt carries the passage,
    so the RAG and closed-book texts are known in advance (GenericFakeChatModel would hand
    out its messages in call order, and the two sides run in parallel)."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        from langchain_core.outputs import ChatGeneration, ChatResult

        prompt = "\n".join(m.text for m in messages)
        text = RAG_TEXT if "Tomas Rilke" in prompt else DIRECT_TEXT
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def scripted() -> ScriptedChat:
    return ScriptedChat(messages=iter(()))


def tutorial_chain(retriever: Any, llm: Any) -> Any:
    """LangChain's RAG tutorial chain, as users write it."""
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | llm | StrOutputParser())


# -- the drop-in --------------------------------------------------------------------------------


def test_drop_in_keeps_the_scripted_chains_input_and_full_string_output(
        tm: TrustMargin, retriever: TrustMarginRetriever) -> None:
    chain = tutorial_chain(retriever, scripted())
    assert chain.invoke(QUESTION) == RAG_TEXT  # the user's own chain, before
    guarded = with_trustmargin(chain, tm)
    recorder = Recorder()
    answer = guarded.invoke(QUESTION, config={"callbacks": [recorder]})
    decision = Decision.model_validate(dict(recorder.events)[DECISION_EVENT])
    # Same input (the question string), same output type (a string), the whole multi-line
    # text of the side TrustMargin kept, exactly as the user's chain produced it.
    assert isinstance(answer, str) and "\n\n" in answer
    assert answer == (RAG_TEXT if decision.source in ("rag", "agree") else DIRECT_TEXT)
    # Both sides ran through the user's prompt: RAG with the user's formatted context, Direct
    # with an empty one; the scorer saw the retrieved document.
    assert decision.rag_raw == RAG_TEXT and decision.direct_raw == DIRECT_TEXT
    assert [p.id for p in decision.passages] == ["velmora"]
    assert guarded.input_schema.model_json_schema()["type"] == "string"
    assert guarded.output_schema.model_json_schema()["type"] == "string"


@pytest.mark.slow
def test_drop_in_with_the_real_chat_model_returns_its_full_answer(
        tm: TrustMargin, retriever: TrustMarginRetriever) -> None:
    chat = LocalChatModel.from_trustmargin(tm, max_new_tokens=40)
    guarded = with_trustmargin(tutorial_chain(retriever, chat), tm, output="decision")
    decision = guarded.invoke(QUESTION)
    assert isinstance(decision, Decision)
    rag_text = (PROMPT | chat | StrOutputParser()).invoke(
        {"context": format_docs(retriever.invoke(QUESTION)), "question": QUESTION})
    direct_text = (PROMPT | chat | StrOutputParser()).invoke({"context": "",
                                                              "question": QUESTION})
    # The candidates are the user's chain's answers, whole (greedy decoding: deterministic).
    assert (decision.rag_raw or decision.rag_answer) == rag_text.strip()
    assert (decision.direct_raw or decision.direct_answer) == direct_text.strip()
    answer = with_trustmargin(tutorial_chain(retriever, chat), tm).invoke(QUESTION)
    assert answer == (rag_text if decision.source in ("rag", "agree")
                      else direct_text).strip()


def test_drop_in_on_a_dict_input_chain_names_the_users_key(
        tm: TrustMargin, retriever: TrustMarginRetriever) -> None:
    chain = ({"context": itemgetter("input") | retriever | format_docs,
              "question": itemgetter("input")} | PROMPT | scripted() | StrOutputParser())
    guarded = with_trustmargin(chain, tm)
    assert guarded.invoke({"input": QUESTION}) in (RAG_TEXT, DIRECT_TEXT)
    assert list(guarded.input_schema.model_json_schema()["properties"]) == ["input"]
    with pytest.raises(InvalidInputError) as err:
        guarded.invoke({"input": "   "})
    assert err.value.field == "input"


def test_drop_in_from_parts_with_a_closed_book_prompt(
        tm: TrustMargin, retriever: TrustMarginRetriever) -> None:
    closed = ChatPromptTemplate.from_messages([("human", "Answer from memory: {question}")])
    guarded = with_trustmargin(None, tm, retriever=retriever, format_docs=format_docs,
                               prompt=PROMPT, llm=scripted() | StrOutputParser(),
                               closed_book_prompt=closed, output="decision")
    decision = guarded.invoke(QUESTION)
    assert decision.rag_raw == RAG_TEXT and decision.direct_raw == DIRECT_TEXT


def test_drop_in_as_a_tool_answers_in_plain_text(tm: TrustMargin,
                                                  retriever: TrustMarginRetriever) -> None:
    tool = with_trustmargin(tutorial_chain(retriever, scripted()), tm).as_tool(
        name="bridges", description="Answers questions about bridges.")
    assert tool.invoke(QUESTION) in (RAG_TEXT, DIRECT_TEXT)


def test_drop_in_refuses_a_blank_question_and_non_document_hits(tm: TrustMargin) -> None:
    tuples = RunnableLambda(lambda q: [("velmora", 1.0)])
    guarded = with_trustmargin(tutorial_chain(tuples, scripted()), tm)
    with pytest.raises(InvalidInputError) as err:
        guarded.invoke("  ")
    assert err.value.field == "question"  # the user's key, not queries[0]
    with pytest.raises(InvalidInputError) as err:
        guarded.invoke(QUESTION)
    assert err.value.field == "retriever(question)[0]" and "tuple" in err.value.problem
    with pytest.raises(InvalidInputError, match="has no retriever") as err:
        with_trustmargin(PROMPT | scripted(), tm)
    assert err.value.field == "chain"


def test_a_retriever_of_strings_is_named_in_the_lcel_path(tm: TrustMargin) -> None:
    strings = RunnableLambda(lambda q: ["The Velmora Bridge was designed by Tomas Rilke."])
    chain = build_trustmargin_chain(strings, tm, closed_book=scripted(), rag=scripted())
    with pytest.raises(InvalidInputError) as err:
        chain.invoke(QUESTION)
    assert err.value.field == "retriever(question)[0]"


def test_drop_in_with_no_documents_returns_the_closed_book_answer(tm: TrustMargin) -> None:
    nothing = RunnableLambda(lambda q: [])
    recorder = Recorder()
    guarded = with_trustmargin(tutorial_chain(nothing, scripted()), tm)
    assert guarded.invoke(QUESTION, config={"callbacks": [recorder]}) == DIRECT_TEXT
    assert dict(recorder.events)[DECISION_EVENT]["reason"] == "no_evidence"


# -- the router's string output and tool ------------------------------------------------------


BRIDGE = {"question": QUESTION, "direct_answer": DIRECT_TEXT, "rag_answer": RAG_TEXT,
          "context": [CORPUS[0].text]}


def test_router_output_answer_feeds_str_output_parser(tm: TrustMargin) -> None:
    decision = TrustMarginRouter(tm=tm).invoke(BRIDGE)
    text = (TrustMarginRouter(tm=tm, output="answer") | StrOutputParser()).invoke(BRIDGE)
    assert text == (RAG_TEXT if decision.source in ("rag", "agree") else DIRECT_TEXT)


def test_router_as_tool_returns_readable_text(tm: TrustMargin) -> None:
    decision = TrustMarginRouter(tm=tm).invoke(BRIDGE)
    out = TrustMarginRouter(tm=tm).as_tool().invoke(BRIDGE)
    assert isinstance(out, str) and "Decision(" not in out and "m_prior=" not in out
    assert out.startswith(RAG_TEXT if decision.source in ("rag", "agree") else DIRECT_TEXT)
    assert f"reason: {decision.reason}" in out


# -- the local LLM and chat model -------------------------------------------------------------


LIST_PROMPT = "List three fruits, one per line, numbered 1 to 3."


def test_local_llm_answers_a_multi_line_prompt_in_full_and_streams(backend: Any) -> None:
    llm = LocalLLM(backend=backend, max_new_tokens=40)
    full = llm.invoke(LIST_PROMPT)
    # The first-line stop belongs to the paper's candidates: here the answer goes on.
    assert full.count("\n") >= 2, full
    paper = backend.generate([backend.render_prompt(LIST_PROMPT)], 40, stop=answer_complete)[0]
    assert len(paper) < len(full)
    chunks = list(llm.stream(LIST_PROMPT))
    assert len(chunks) > 3 and "".join(chunks) == full
    stop = full.split("\n")[1]
    assert llm.invoke(LIST_PROMPT, stop=[stop]) == full[:full.find(stop)]


def test_local_llm_refuses_a_prompt_longer_than_the_window(backend: Any) -> None:
    llm = LocalLLM(backend=backend)
    with pytest.raises(InvalidInputError) as err:
        llm.invoke("word " * (backend.context_window + 10))
    assert err.value.field == "prompt" and "window" in err.value.problem


def test_local_chat_model_uses_the_chat_template_streams_and_stops(backend: Any) -> None:
    chat = LocalChatModel(backend=backend, max_new_tokens=30)
    messages = PROMPT.invoke({"context": CORPUS[0].text, "question": QUESTION}).to_messages()
    rendered = backend.tokenizer.apply_chat_template(
        [{"role": "system", "content": messages[0].text},
         {"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True)
    # The system and user turns reach the model through its own chat template.
    assert render_messages(backend, messages) == rendered
    assert "<|im_start|>system" in rendered and "Human:" not in rendered
    full = chat.invoke(messages).content
    assert "Rilke" in full
    streamed: Iterator[Any] = chat.stream(messages)
    pieces = [c.content for c in streamed]
    assert len(pieces) > 3 and "".join(pieces) == full
    word = full.split()[2]
    assert chat.invoke(messages, stop=[word]).content == full[:full.find(word)]
    with pytest.raises(InvalidInputError) as err:
        chat.invoke("word " * (backend.context_window + 10))
    assert err.value.field == "messages"


def test_local_chat_model_async_stream_matches(backend: Any) -> None:
    chat = LocalChatModel(backend=backend, max_new_tokens=12)

    async def collect() -> str:
        return "".join([c.content async for c in chat.astream("Say hello.")])

    assert asyncio.run(collect()) == chat.invoke("Say hello.").content

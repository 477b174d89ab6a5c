"""The local chat model takes tools and gives structured output, on the real
embedded SmolLM2-135M: schema-guided decoding writes the JSON and the model fills the values;
a reply that cannot fit the schema is a clear typed error. A real LangGraph ToolNode runs the
tool call and the model reads the result back.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from trustmargin_integrations.errors import BackendError, InvalidInputError
from trustmargin_integrations.guided import StructuredOutputError
from trustmargin_integrations.langchain import LocalChatModel


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str = Field(description="The person's full name")
    age: int = Field(description="Age in years")
    role: Literal["engineer", "painter", "doctor"]


class Counts(BaseModel):
    """Word counts (a mapping: no fixed fields, so the model writes the JSON itself)."""

    counts: dict[str, int]


class Bridge(TypedDict):
    """A bridge."""

    name: str
    designer: str


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny in {city}."


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture(scope="module")
def chat(backend: Any) -> LocalChatModel:
    return LocalChatModel(backend=backend, max_new_tokens=48)


@pytest.mark.slow
def test_structured_output_fills_a_pydantic_schema(chat: LocalChatModel) -> None:
    person = chat.with_structured_output(Person).invoke(
        "Tomas Rilke is a 41-year-old engineer from Oststadt.")
    assert person == Person(name="Tomas Rilke", age=41, role="engineer")
    bridge = chat.with_structured_output(Bridge).invoke(
        "The Velmora Bridge was designed by Tomas Rilke.")
    assert set(bridge) == {"name", "designer"} and "Rilke" in bridge["designer"]
    raw = chat.with_structured_output(Person, include_raw=True).invoke(
        [HumanMessage("Tomas Rilke is a 41-year-old engineer from Oststadt.")])
    assert isinstance(raw["raw"], AIMessage) and raw["parsing_error"] is None
    assert raw["parsed"] == person


@pytest.mark.slow
def test_a_reply_that_cannot_fit_the_schema_is_a_clear_error(chat: LocalChatModel) -> None:
    with pytest.raises(StructuredOutputError) as err:
        chat.with_structured_output(Counts).invoke("The Velmora Bridge is old.")
    assert isinstance(err.value, BackendError) and isinstance(err.value, ValueError)
    assert "not valid JSON" in str(err.value) or "does not match" in str(err.value)
    assert "Fix:" in str(err.value) and err.value.llm_output.startswith("{")
    raw = chat.with_structured_output(Counts, include_raw=True).invoke(
        "The Velmora Bridge is old.")
    assert raw["parsed"] is None and isinstance(raw["parsing_error"], StructuredOutputError)
    with pytest.raises(InvalidInputError) as missing:
        chat.with_structured_output(None)
    assert missing.value.field == "schema"


@pytest.mark.slow
def test_a_forced_tool_call_runs_in_a_tool_node_and_the_result_reads_back(
        chat: LocalChatModel) -> None:
    model = chat.bind_tools([get_weather, add], tool_choice="get_weather")
    question = HumanMessage("What is the weather in Paris?")
    call = model.invoke([question])
    assert call.content == "" and len(call.tool_calls) == 1
    assert call.tool_calls[0]["name"] == "get_weather"
    assert call.tool_calls[0]["args"] == {"city": "Paris"}
    streamed = list(model.stream([question]))
    assert streamed[0].tool_call_chunks[0]["name"] == "get_weather"
    # A real LangGraph loop: the model calls, the ToolNode runs the tool, the model reads the
    # result back (as the user turn that brings it) and answers. (Offered the tools again, a
    # 135M model tends to call again: the answer step offers none.)
    builder = StateGraph(MessagesState)
    builder.add_node("call", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([get_weather, add]))
    builder.add_node("answer", lambda state: {"messages": [chat.invoke(state["messages"])]})
    builder.add_edge(START, "call")
    builder.add_edge("call", "tools")
    builder.add_edge("tools", "answer")
    builder.add_edge("answer", END)
    messages = builder.compile().invoke({"messages": [question]})["messages"]
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage",
                                                    "AIMessage"]
    assert isinstance(messages[2], ToolMessage)
    assert messages[2].content == "It is sunny in Paris."
    assert messages[3].text.strip() and not messages[3].tool_calls
    # "any" picks the most likely tool; "auto" lets the model answer in words.
    assert chat.bind_tools([get_weather], tool_choice="any").invoke(
        [question]).tool_calls[0]["args"] == {"city": "Paris"}
    with pytest.raises(InvalidInputError) as err:
        chat.bind_tools([get_weather], tool_choice="get_time")
    assert err.value.field == "tool_choice"

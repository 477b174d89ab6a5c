"""A sub-question generator a small local model can drive: LlamaIndex's
``SubQuestionQueryEngine`` with :class:`LocalLlamaIndexLLM`.

LlamaIndex's ``LLMQuestionGenerator`` asks the model for a JSON list in a code block; a 135M
model answers with prose ("No valid JSON found in output"), and ``from_defaults`` without a
generator needs the OpenAI one. :class:`LocalQuestionGenerator` writes the JSON itself with the
package's schema-guided decoder: the model writes each sub-question and picks each tool by
likelihood among the tools' names, so the result always parses and names a real tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.question_gen.types import BaseQuestionGenerator, SubQuestion
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.llms import LocalLlamaIndexLLM

__all__ = ["LocalQuestionGenerator"]

_INSTRUCTION = ("Break the user's question into at most {n} simpler sub-questions. Each "
                "sub-question is answered by one of these tools:\n{tools}\nWrite each "
                "sub-question so it can be answered on its own.")


class LocalQuestionGenerator(BaseQuestionGenerator):
    """``SubQuestionQueryEngine``'s question generator on a :class:`LocalLlamaIndexLLM`.

    Each sub-question is written by the model and its tool is the tool whose name the model
    finds most likely (schema-guided decoding, see :mod:`trustmargin_integrations.guided`);
    at most ``max_questions`` of them, at least one.

    Example:
        >>> SubQuestionQueryEngine.from_defaults(tools, llm=llm,
        ...     question_gen=LocalQuestionGenerator(llm))  # doctest: +SKIP
    """

    def __init__(self, llm: LocalLlamaIndexLLM, *, max_questions: int = 3) -> None:
        if not isinstance(llm, LocalLlamaIndexLLM):
            raise InvalidInputError("llm", f"a {type(llm).__name__} is not a "
                                    "LocalLlamaIndexLLM", "pass LocalLlamaIndexLLM."
                                    "from_trustmargin(tm); another LLM can use LlamaIndex's "
                                    "own LLMQuestionGenerator")
        if isinstance(max_questions, bool) or not isinstance(max_questions, int) \
                or max_questions < 1:
            raise InvalidInputError("max_questions", f"is {max_questions!r}",
                                    "pass a positive integer")
        self.llm = llm
        self.max_questions = max_questions

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        return None

    def generate(self, tools: Sequence[ToolMetadata], query: QueryBundle) -> list[SubQuestion]:
        """The sub-questions of ``query``, each with one of ``tools``."""
        if not tools:
            raise InvalidInputError("query_engine_tools", "is empty",
                                    "give the SubQuestionQueryEngine at least one tool")
        names = [tool.name for tool in tools]
        listed = "\n".join(f"- {tool.name}: {tool.description}" for tool in tools)
        schema = {"type": "object", "properties": {"questions": {
            "type": "array", "items": {"type": "object", "properties": {
                "sub_question": {"type": "string"}, "tool_name": {"enum": names}}}}}}
        rendered = self.llm.render_messages([
            ChatMessage(role=MessageRole.SYSTEM,
                        content=_INSTRUCTION.format(n=self.max_questions, tools=listed)),
            ChatMessage(role=MessageRole.USER, content=query.query_str)])
        # Imported here: the adapter's import loads no guided decoding until it is used.
        from trustmargin_integrations.guided import local_decoder

        decoder = local_decoder(self.llm.backend, schema, max_items=self.max_questions)
        _, value = decoder.write(rendered, schema)
        questions = [SubQuestion(sub_question=q["sub_question"].strip() or query.query_str,
                                 tool_name=q["tool_name"]) for q in value["questions"]]
        return questions

    async def agenerate(self, tools: Sequence[ToolMetadata], query: QueryBundle
                        ) -> list[SubQuestion]:
        """:meth:`generate` in a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.generate, tools, query)

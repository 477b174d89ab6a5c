"""LangChain's own standard unit suite (``langchain-tests``) on LocalChatModel, on the real
embedded model (integration tier: the chat model decodes with a loaded local backend)."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from langchain_tests.unit_tests import ChatModelUnitTests

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import LocalChatModel


@cache
def _embedded() -> Any:
    from trustmargin_integrations.backends.hf import HFBackend

    return HFBackend.load("smollm2-135m", device="cpu", dtype="float32")


class TestLocalChatModelStandard(ChatModelUnitTests):
    """The suite's checks of construction, serialization, LangSmith params, tool binding and
    structured output, as LangChain runs them on every chat model integration."""

    @property
    def chat_model_class(self) -> type[LocalChatModel]:
        return LocalChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"backend": _embedded(), "max_new_tokens": 16}


def test_a_call_naming_another_model_is_refused() -> None:
    chat = LocalChatModel(backend=_embedded(), max_new_tokens=4)
    with pytest.raises(InvalidInputError) as err:
        chat.invoke("Hi", model="gpt-4o")
    assert err.value.field == "model" and "drop the per-call model" in err.value.fix
    assert chat._get_ls_params()["ls_model_name"] == _embedded().model_id

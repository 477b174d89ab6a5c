"""Local language models for LangChain on a TrustMargin backend."""

from __future__ import annotations

from typing import Any, cast

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LLM
from langchain_core.outputs import Generation, LLMResult
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend


class LocalLLM(LLM):
    """A LangChain LLM on a local TrustMargin backend (greedy decoding, chat template on).

    Each prompt is sent as one user message through the backend's chat template, so
    ``PromptTemplate.from_template(QUESTION_ONLY_TEMPLATE) | LocalLLM(...)`` produces exactly
    the generation the core would make. A batch of prompts is one ``backend.generate`` call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(20, ge=1, le=512, description="Greedy generation length.")

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> LocalLLM:
        """Share the arbiter's model (no second copy in memory)."""
        kwargs.setdefault("max_new_tokens", tm.config.max_new_tokens)
        return cls(backend=tm.backend, **kwargs)

    @property
    def _llm_type(self) -> str:
        return "trustmargin-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": getattr(self.backend, "model_id", "unknown"),
                "max_new_tokens": self.max_new_tokens}

    def _generate(self, prompts: list[str], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                  ) -> LLMResult:
        backend = cast(Backend, self.backend)
        rendered = [backend.render_prompt(p) for p in prompts]
        texts = backend.generate(rendered, self.max_new_tokens)
        return LLMResult(generations=[[Generation(text=_cut_at_stop(t, stop))] for t in texts])

    def _call(self, prompt: str, stop: list[str] | None = None,
              run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> str:
        return self._generate([prompt], stop, run_manager).generations[0][0].text


def _cut_at_stop(text: str, stop: list[str] | None) -> str:
    cut = len(text)
    for s in stop or []:
        found = text.find(s)
        if found != -1:
            cut = min(cut, found)
    return text[:cut]



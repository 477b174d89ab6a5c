"""Prompt rendering and token counting shared by every backend that holds a local tokenizer.

The remote backend tokenizes locally with the served model's tokenizer so that the context
budget, the chat template and the answer lengths are exactly the local backend's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from trustmargin_integrations.backends.base import EngineDefaults


class LocalTokenizerMixin(EngineDefaults):
    """``render_prompt``, ``count_tokens``, ``truncate_tokens`` from a local tokenizer.

    Needs ``self.tokenizer`` (a transformers tokenizer, or the remote backend's
    :class:`~.openai_compat.tokenizer.ServedTokenizer`, which offers the same calls); an
    optional ``self._renderer`` replaces the chat template.
    """

    tokenizer: Any
    _renderer: Callable[[str], str] | None = None

    @property
    def has_chat_template(self) -> bool:
        """True when prompts are wrapped in the tokenizer's chat template."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render_prompt(self, user_message: str) -> str:
        """The user message inside the model's chat template, ready for generation."""
        if self._renderer is not None:
            return self._renderer(user_message)
        if not self.has_chat_template:
            return user_message
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user_message}], tokenize=False,
            add_generation_prompt=True,
        )

    def encode_answer(self, answer: str) -> list[int]:
        """Token ids of a text on its own, without special tokens (as answers are scored)."""
        return list(self.tokenizer(answer, add_special_tokens=False).input_ids)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.encode_answer(text))

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, in one tokenizer call."""
        if not texts:
            return []
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)
                .input_ids]

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """The first ``max_tokens`` tokens of ``text``, decoded back to text."""
        return self.tokenizer.decode(self.encode_answer(text)[:max_tokens])

"""A backend that scores and generates through an OpenAI-compatible ``/v1/completions`` server.

Works with vLLM and the llama.cpp server of ``llama-cpp-python`` (any server that can echo the
prompt with per-token log-probabilities).

How a likelihood is read from the server:

* The request is the rendered prompt and the answer as ONE string, with ``echo=true``,
  ``logprobs=1``, ``max_tokens=1`` and ``temperature=0``. The server returns a log-probability
  for every prompt token (the first one is ``null``) followed by the one generated token.
* The answer's tokens are taken from the END of the echoed sequence: the generated tokens
  (``usage.completion_tokens``, normally one) are dropped, then the last ``n`` entries are the
  answer, where ``n`` is the answer's token count from tokenizing it on its own, exactly as
  the local backend does. Counting from the end matters because servers differ at the start:
  vLLM returns the BOS token with a ``null`` log-probability, llama-cpp-python drops a leading
  BOS and also omits later tokens equal to BOS (``<|im_start|>`` in ChatML templates).
* The tail's token texts are checked against the answer, so a tokenizer that does not match
  the served model fails loudly instead of producing wrong numbers.
* The sum over those ``n`` log-probabilities divided by ``n`` is the length-normalized
  likelihood, identical to the local backend's definition.

Tokenization is done LOCALLY with the model's tokenizer (named model, GGUF file, folder with
``tokenizer.json`` or hub id; :mod:`.tokenizer` reads it with the ``tokenizers`` package, so
a remote-only install needs neither torch nor transformers). It is needed anyway to render
the same chat template as the local backend, and it keeps ``count_tokens``/
``truncate_tokens`` (called many times per question while the context is cut to its budget)
free of network round trips. :meth:`OpenAICompatBackend.check_tokenizer`
compares it with the server's own tokenize endpoint once.

Modules: :mod:`.backend` (``OpenAICompatBackend``, ``load_tokenizer``), :mod:`.tokenizer`
(the served model's tokenizer without transformers), :mod:`.transport`
(the retried, bounded HTTP POST), :mod:`.logprobs` (reading and checking the echoed numbers),
:mod:`.settings` (URL, key, waits and the ``TRUSTMARGIN_REMOTE_*`` variables).
"""

from trustmargin_integrations.backends.openai_compat.backend import (
    OpenAICompatBackend,
    load_tokenizer,
)
from trustmargin_integrations.backends.openai_compat.logprobs import LOGPROB_TOLERANCE
from trustmargin_integrations.backends.openai_compat.settings import (
    ENV_API_KEY,
    ENV_MODEL,
    ENV_PREFIX,
    ENV_URL,
    RemoteVariables,
)
from trustmargin_integrations.backends.openai_compat.transport import (
    MAX_RESPONSE_BYTES,
    RETRY_STATUS,
)

# Re-exported where it has always been importable from (tests and docs use it).
from trustmargin_integrations.urls import redact_url

__all__ = [
    "ENV_API_KEY",
    "ENV_MODEL",
    "ENV_PREFIX",
    "ENV_URL",
    "LOGPROB_TOLERANCE",
    "MAX_RESPONSE_BYTES",
    "RETRY_STATUS",
    "OpenAICompatBackend",
    "RemoteVariables",
    "load_tokenizer",
    "redact_url",
]

"""A backend that scores and generates through an OpenAI-compatible ``/v1/completions`` server.

Works with vLLM and the llama.cpp server of ``llama-cpp-python`` (any server that can echo the
prompt with per-token log-probabilities). An answer's likelihood is read from the echoed tail
of prompt + answer (:mod:`.logprobs`), with the served model's tokenizer run locally
(:mod:`.tokenizer`); how and why: docs/decisions.md, "Likelihoods from a server".
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

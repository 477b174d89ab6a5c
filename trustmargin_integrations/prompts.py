"""The three prompt views of the paper's appendix "Prompt Templates", verbatim, and the
``Passage i:`` lines a context is made of. Chat-template rendering happens in the backend, on
top of these; fitting passages into a token budget is :mod:`.context`'s job."""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.schema import ViewPrompts

PROMPT_VERSION = "trustmargin-appendix-v1"

QUESTION_ONLY_TEMPLATE = (
    "You are a helpful AI assistant.\n"
    "Answer the user's question concisely with a short phrase or a single word.\n"
    "\n"
    "Question:\n"
    "{question}\n"
    "\n"
    "Answer:"
)

QUESTION_CONTEXT_TEMPLATE = (
    "####CONTEXT begin####\n"
    "{context}\n"
    "####CONTEXT end####\n"
    "\n"
    "You are a helpful AI assistant.\n"
    "Answer the user's question according to the CONTEXT.\n"
    "Your answer should be concise: a short phrase or a single word.\n"
    "\n"
    "Question:\n"
    "{question}\n"
    "\n"
    "Answer:"
)

CONTEXT_ONLY_TEMPLATE = (
    "####CONTEXT begin####\n"
    "{context}\n"
    "####CONTEXT end####\n"
    "\n"
    "You are a helpful AI assistant.\n"
    "Produce the concise answer phrase that is most supported by the CONTEXT.\n"
    "\n"
    "Answer:"
)


def question_free_prompt() -> str:
    """The question-only prompt with nothing asked: ours, not the paper's. Against it, the
    question-only view says how much a text depends on the question (which of two chat
    texts' differing places answers it, :mod:`trustmargin_integrations.arbiter.comparisons`)."""
    return QUESTION_ONLY_TEMPLATE.format(question="")


def format_passage(index: int, passage: str) -> str:
    """One line of the concatenated context: ``Passage i: ...`` (0-based, retrieval order)."""
    return f"Passage {index}: {passage}"


def join_passages(passages: Sequence[str]) -> str:
    """Concatenate passages in retrieval order, one ``Passage i:`` line each."""
    return "\n".join(format_passage(i, p) for i, p in enumerate(passages))


def view_texts(question: str, context: str) -> ViewPrompts:
    """Fill the three appendix templates for one question and its context string."""
    return ViewPrompts(
        question_only=QUESTION_ONLY_TEMPLATE.format(question=question),
        question_context=QUESTION_CONTEXT_TEMPLATE.format(context=context, question=question),
        context_only=CONTEXT_ONLY_TEMPLATE.format(context=context),
    )


# Ours, not the paper's: the scorer model states the short answer a chat text gives, so that the
# paper's margins can score short forms (``TrustMarginConfig.scoring_form="extract"``). The
# answer is asked for "copied from the response" because an extraction that does not occur in
# its text is not what the text says, and is refused (arbiter.comparisons). The instruction
# comes first so that every extraction prompt of a batch shares it as a prefix, run once
# (backends.hf.decoding.prefill; a server's prefix cache does the same).
EXTRACT_TEMPLATE = (
    "What is the short answer (a short phrase or a single word, copied from the Response) "
    "that the Response below gives to the Question?\n"
    "\n"
    "Question:\n"
    "{question}\n"
    "\n"
    "Response:\n"
    "{response}\n"
    "\n"
    "Short answer:"
)


# Part of a cached result's key under scoring_form="extract" (form_prompts): a run directory
# made with an earlier extraction prompt is re-read, never reused. v1 asked after the Response.
EXTRACT_PROMPT_VERSION = "extract-instruction-first-v2"


# Part of a cached result's key under the forms that compare given texts by difference (the
# extraction forms fall back to it): a result scored before each part was scored alone and
# after both sides' clause words (arbiter/comparisons.in_each_framing) is re-read, never reused.
DIFFERENCE_VERSION = "each-framing-v1"


def form_prompts(form: str) -> dict[str, str]:
    """What a scoring form's results depend on besides its name, for cache keys: the
    extraction prompt's version under the forms that may extract (``"extract"``, ``"auto"``),
    and the version of the difference comparison under those and ``"differential"``; nothing
    for the other forms."""
    keyed = {"difference": DIFFERENCE_VERSION} if form in ("differential", "extract",
                                                             "auto") else {}
    if form in ("extract", "auto"):
        keyed["extract_prompt"] = EXTRACT_PROMPT_VERSION
    return keyed


def extract_prompt(question: str, response: str) -> str:
    """The extraction prompt for one chat text (rendered by the backend's chat template)."""
    return EXTRACT_TEMPLATE.format(question=question, response=response)

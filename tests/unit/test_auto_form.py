"""The default ``scoring_form="auto"`` on a scripted backend: a scorer known to have 1B
parameters or more is asked for each text's short answer; one of unknown or smaller size is
not, and the pair is compared by difference (no model; the scripted backend's declared size is
the one thing ``auto`` reads of a scorer)."""

from __future__ import annotations

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.testing import ScriptedBackend, ScriptedPrompt

QUESTION = "Who designed the Velmora Bridge?"
PASSAGE = "The Velmora Bridge was designed by the engineer Tomas Rilke."
DIRECT = "I believe it was Anna Berg, but I am not completely sure."
RAG = "According to the context, the Velmora Bridge was designed by Tomas Rilke [1]."


def _short_answer(read: ScriptedPrompt) -> str:
    """What a scorer that reads answers out of text states for each chat text."""
    return "Anna Berg" if "Anna Berg" in (read.context or "") else "Tomas Rilke"


def _decide(parameters: int | None) -> tuple[ScriptedBackend, Decision]:
    backend = ScriptedBackend(answers=_short_answer, default_logprob=-2.0,
                              parameters=parameters)
    decision = TrustMargin(backend).arbitrate(QUESTION, [PASSAGE], direct_answer=DIRECT,
                                              rag_answer=RAG)
    return backend, decision


def test_a_scorer_of_a_billion_parameters_is_asked_for_short_answers() -> None:
    backend, decision = _decide(1_543_714_304)
    assert sorted(p.context for p, _ in backend.generated) == sorted([DIRECT, RAG])
    assert all(p.view == "extract" and p.question == QUESTION for p, _ in backend.generated)
    assert decision.scoring_form == "extract"
    assert (decision.direct_answer, decision.rag_answer) == ("Anna Berg", "Tomas Rilke")
    assert decision.answer in {DIRECT, RAG}


@pytest.mark.parametrize("parameters", [None, 134_515_008])
def test_a_scorer_of_unknown_or_smaller_size_is_compared_by_difference(
        parameters: int | None) -> None:
    backend, decision = _decide(parameters)
    assert backend.generated == []
    assert decision.scoring_form == "differential"

"""A candidate with no visible character is blank, whatever invisible characters it holds.

Before, only whitespace counted: ``rag_answer="\\u200b"`` (a zero-width space) was scored on
the real model and could win, while an NBSP-only answer was blank. ``is_blank_text`` in
``validation.py`` is now the one test, for questions, passages, candidate names and the
candidates the arbiter would score. Runs on the real embedded model.
"""

from __future__ import annotations

import pytest

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.validation import is_blank_text

# Format characters (Cf): zero-width space, non-joiner and joiner, word joiner, BOM, soft
# hyphen, a direction mark; separators (Z*): NBSP, ideographic space, line and paragraph
# separators; and controls.
INVISIBLE = ["\u200b", "\u200c\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e",
             "\u00a0", "\u3000", "\u2028", "\u2029", " \u200b\t\ufeff\n", "\x00\x85"]


@pytest.mark.parametrize("text", ["", *INVISIBLE])
def test_text_of_invisible_characters_only_is_blank(text: str) -> None:
    assert is_blank_text(text)


@pytest.mark.parametrize("text", ["Paris", "\u200bParis", "東京", "\u00a0.", "0"])
def test_text_with_a_visible_character_is_not_blank(text: str) -> None:
    assert not is_blank_text(text)


@pytest.mark.parametrize("invisible", ["\u200b", "\ufeff", "\u200c\u200d\u2060"])
def test_an_invisible_candidate_is_never_scored_or_chosen(tm: TrustMargin,
                                                          invisible: str) -> None:
    question, passages = "Capital of France?", ["Lyon is a city in France."]
    rag = tm.arbitrate(question, passages, direct_answer="Paris", rag_answer=invisible)
    assert (rag.answer, rag.source, rag.reason, rag.m) == ("Paris", "direct",
                                                          "rag_answer_blank", None)
    assert rag.rag_likelihoods is None  # not scored
    direct = tm.arbitrate(question, passages, direct_answer=invisible, rag_answer="Lyon")
    assert (direct.answer, direct.reason, direct.m) == ("Lyon", "direct_answer_blank", None)
    both = tm.arbitrate(question, passages, direct_answer=invisible, rag_answer=invisible)
    assert (both.reason, both.m) == ("both_answers_blank", None)

"""Which extractions are no short answers: a text that restates the question (pure text, no
model; any language, no list of phrases). The question and answers are invented here."""

from __future__ import annotations

from trustmargin_integrations.comparison import RESTATED_SHARE, restates_question

QUESTION = "What currency is used in the country whose anthem is the Song of Velmora?"


def test_a_chat_answer_built_around_the_question_restates_it() -> None:
    # A chat model's answer shape: it says 11 of the question's 12 distinct words.
    assert restates_question(QUESTION, "The currency used in the country whose anthem is the "
                                       "Song of Velmora is the Velmoran mark.")
    # Read losslessly as the comparison reads: case, markdown and invisible characters aside.
    assert restates_question(QUESTION, "**THE CURRENCY USED IN THE COUNTRY WHOSE ANTHEM IS "
                                       "THE SONG OF VEL\u200bMORA IS THE VELMORAN MARK.**")
    # Any script: the question's own words, whatever they are.
    assert restates_question("ヴェルモラの歌を国歌とする国の通貨は何ですか？",
                             "ヴェルモラの歌を国歌とする国の通貨はヴェルモラ・マルクです。")


def test_short_and_framed_answers_do_not_restate_the_question() -> None:
    for text in ("Velmoran mark.", "Hello! Velmoran mark.", "### Answer\n\n**Velmoran mark**",
                 "According to the context, the answer is the Velmoran mark [1].",
                 "I believe it is the Velmoran mark, but I am not completely sure."):
        assert not restates_question(QUESTION, text), text
    assert not restates_question("", "anything at all")


def test_the_share_is_of_the_questions_distinct_words() -> None:
    question = "Who designed the Velmora bridge?"  # 5 distinct words
    needed = -(-5 * RESTATED_SHARE // 1)  # at least half of them, rounded up
    assert needed == 3
    assert restates_question(question, "The Velmora bridge is by Tomas Rilke.")  # 3 of 5
    assert not restates_question(question, "The bridge is by Tomas Rilke.")  # 2 of 5
    # A word said twice counts once, on both sides.
    assert not restates_question(question, "Bridge, bridge, bridge: Tomas Rilke.")

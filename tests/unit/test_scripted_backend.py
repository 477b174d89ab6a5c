"""The scripted backend itself: the protocol, its plain tokenizer, prompts read back into
views, generation cut as a model's is, scores as given."""

from __future__ import annotations

import pytest

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import Backend, ContinuationRequest
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import question_free_prompt, view_texts
from trustmargin_integrations.testing import ScriptedBackend, ScriptedPrompt, ScriptError

TEMPLATE = "<user>{message}</user>\n<assistant>"


def test_it_is_a_backend_and_says_what_it_is() -> None:
    backend = ScriptedBackend(model_id="tiny")
    assert isinstance(backend, Backend)
    assert backend.capabilities.label == "scripted:tiny"
    assert backend.context_window is None


@pytest.mark.parametrize(("text", "tokens"), [
    ("Paris.", ["Paris", "."]),
    ("  Tomas Rilke ", ["Tomas", "Rilke"]),
    ("1,024 m", ["1", ",", "024", "m"]),
    ("", []),
])
def test_tokens_are_words_and_single_marks(text: str, tokens: list[str]) -> None:
    backend = ScriptedBackend()
    assert backend.tokens(text) == tokens
    assert backend.count_tokens(text) == len(tokens)


def test_counts_in_a_batch_match_one_by_one() -> None:
    backend = ScriptedBackend()
    assert backend.count_tokens_batch(["a b", "", "c, d."]) == [2, 0, 4]


@pytest.mark.parametrize(("limit", "expected"), [
    (0, ""), (1, "The"), (3, "The Eiffel Tower"), (4, "The Eiffel Tower,"),
    (9, "The Eiffel Tower, Paris"),
])
def test_truncation_keeps_whole_tokens(limit: int, expected: str) -> None:
    assert ScriptedBackend().truncate_tokens("The Eiffel Tower, Paris", limit) == expected


def test_batches_sort_by_length_and_cut_to_size() -> None:
    assert ScriptedBackend().batches([5, 1, 3, 2], 3) == [[1, 3, 2], [0]]


@pytest.mark.parametrize("view", ["question_only", "question_context", "context_only"])
def test_each_view_is_read_back_through_the_chat_template(view: str) -> None:
    backend = ScriptedBackend(chat_template=TEMPLATE)
    texts = view_texts("Who built it?", "Passage 0: Rilke built it.")
    read = backend.read_prompt(backend.render_prompt(getattr(texts, view)))
    assert read.view == view
    assert read.message == getattr(texts, view)
    assert read.question == (None if view == "context_only" else "Who built it?")
    assert read.context == (None if view == "question_only" else "Passage 0: Rilke built it.")
    assert read.prefix == ""


def test_a_scored_prefix_is_read_after_the_template() -> None:
    backend = ScriptedBackend(chat_template=TEMPLATE)
    prompt = backend.render_prompt(view_texts("Who?", "").question_only) + "It was"
    read = backend.read_prompt(prompt)
    assert (read.view, read.question, read.prefix) == ("question_only", "Who?", "It was")


def test_the_question_free_prompt_is_its_own_view() -> None:
    backend = ScriptedBackend()
    read = backend.read_prompt(backend.render_prompt(question_free_prompt()))
    assert (read.view, read.question) == ("question_free", None)


def test_a_free_prompt_keeps_its_message() -> None:
    backend = ScriptedBackend(chat_template=TEMPLATE)
    read = backend.read_prompt(backend.render_prompt("Tell me a joke"))
    assert read == ScriptedPrompt(prompt=backend.render_prompt("Tell me a joke"),
                                  message="Tell me a joke")


def test_a_template_without_its_message_slot_is_refused() -> None:
    with pytest.raises(InvalidInputError) as err:
        ScriptedBackend(chat_template="<user></user>")
    assert err.value.field == "chat_template"
    assert "{message}" in err.value.fix


def test_generation_is_cut_to_max_new_tokens_and_at_the_stop() -> None:
    backend = ScriptedBackend(answers={"Q": "Tomas Rilke\nHe was an engineer."})
    assert backend.generate(["Q"], 2) == ["Tomas Rilke"]
    assert backend.generate(["Q"], 50, stop=answer_complete) == ["Tomas Rilke\n"]
    assert backend.generate(["Q"], 50) == ["Tomas Rilke\nHe was an engineer."]
    assert [text for _, text in backend.generated] == [
        "Tomas Rilke", "Tomas Rilke\n", "Tomas Rilke\nHe was an engineer."]


def test_an_answer_keyed_by_view_and_question_wins_over_the_view() -> None:
    backend = ScriptedBackend(answers={"question_only": "generic",
                                       ("question_only", "Who?"): "specific"})
    prompts = [view_texts(q, "").question_only for q in ("Who?", "What?")]
    assert backend.generate(prompts, 10) == ["specific", "generic"]


def test_a_score_is_the_given_mean_times_the_tokens() -> None:
    backend = ScriptedBackend(logprobs={("question_only", "Tomas Rilke."): -0.5})
    prompt = view_texts("Who?", "").question_only
    [score] = backend.score_continuations([ContinuationRequest(prompt, "Tomas Rilke.")])
    assert (score.logprob_sum, score.num_tokens, score.mean) == (-1.5, 3, -0.5)


def test_a_script_key_names_the_words_without_the_leading_space() -> None:
    backend = ScriptedBackend(logprobs={("question_only", "Rilke"): -2.0})
    prompt = view_texts("Who?", "").question_only + "It was"
    [score] = backend.session().__enter__().score([ContinuationRequest(prompt, " Rilke")])
    assert score.mean == -2.0


def test_an_unscripted_continuation_names_what_was_looked_up() -> None:
    backend = ScriptedBackend()
    with pytest.raises(ScriptError, match="'Berg'") as err:
        backend.score_continuations([ContinuationRequest(view_texts("Who?", "").question_only,
                                                         "Berg")])
    assert "('question_only', 'Who?', 'Berg')" in str(err.value)


def test_the_default_logprob_fills_the_gaps_and_a_blank_scores_nothing() -> None:
    backend = ScriptedBackend(default_logprob=-4.0)
    scores = backend.score_continuations([ContinuationRequest("x", "a b"),
                                          ContinuationRequest("x", "  ")])
    assert [(s.logprob_sum, s.num_tokens) for s in scores] == [(-8.0, 2), (0.0, 0)]


def test_callable_scripts_see_the_prompt_read_back() -> None:
    seen: list[ScriptedPrompt] = []

    def answer(prompt: ScriptedPrompt) -> str:
        seen.append(prompt)
        return prompt.question or "none"

    backend = ScriptedBackend(answers=answer,
                              logprobs=lambda prompt, text: -float(len(text)))
    assert backend.generate([view_texts("Why?", "ctx").question_context], 10) == ["Why?"]
    assert seen[0].context == "ctx"
    [score] = backend.score_continuations([ContinuationRequest("free", "abcd")])
    assert score.mean == -4.0

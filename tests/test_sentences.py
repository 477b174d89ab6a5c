"""The one sentence splitter (trustmargin_integrations.sentences): the first sentence of each
IRCoT reasoning step and FLARE's look-ahead end both come from it."""

from __future__ import annotations

import pytest

from trustmargin_integrations.sentences import ends_sentence, first_sentence


@pytest.mark.parametrize(("text", "first"), [
    (" Paris is in France. It is big.", "Paris is in France."),
    ("St. Louis is in the U.S. today. Next.", "St. Louis is in the U.S. today."),
    ("Mt. Everest is 8,849 m high. It grows.", "Mt. Everest is 8,849 m high."),
    ("It weighs 3.5 kg\nmore", "It weighs 3.5 kg"),
    ("One sentence only", "One sentence only"),
    # a lower-case word after the period continues the sentence
    ("It was 3 p.m. yes", "It was 3 p.m. yes"),
    ("Born Jan. 5 in Rome. Then he left.", "Born Jan. 5 in Rome."),
    ("Rev. John Westley was a minister. He preached.", "Rev. John Westley was a minister."),
    ("Hood of Horror (a.k.a. Hood) is a film. It was made in 2006.",
     "Hood of Horror (a.k.a. Hood) is a film."),
    ("Henry (1176? – 1216) was an emperor. He ruled.", "Henry (1176? – 1216) was an emperor."),
    # scripts without case start a sentence
    ("Paris. 東京は日本の首都です。", "Paris."),
    ("Es París. Él vive allí.", "Es París."),
    ('It is Paris! "Yes," she said.', "It is Paris!"),
    ("\n\nFirst line. Second.\nThird line.", "First line."),
])
def test_first_sentence(text: str, first: str) -> None:
    assert first_sentence(text) == first


def test_ends_sentence_knows_abbreviations_and_initials() -> None:
    assert ends_sentence("in 1987.") and ends_sentence("Really?") and ends_sentence("Yes!")
    for text in ("J.", "Dr.", "the U.S.", "at 3 p.m.", "e.g.", "Jan.", "...", ""):
        assert not ends_sentence(text), text

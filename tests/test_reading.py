"""The lossless reading of a text (trustmargin_integrations.reading): every sign, symbol and
digit is kept, only what a reader does not see or read differently is dropped, and two texts
agree iff they read alike. No model: the reading is text alone."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trustmargin_integrations.comparison import Span, differential, scored_text
from trustmargin_integrations.reading import keys, read, same_reading, stated_in

OPPOSITE_FACTS = [
    ("The temperature was 5 °C.", "The temperature was -5 °C."),
    ("The temperature was 5 °C.", "The temperature was −5 °C."),
    ("O+", "O-"), ("HIV+", "HIV-"), ("C++", "C"), ("$100", "€100"), ("5%", "5‰"),
    ("x > 5", "x < 5"), ("x == 1", "x != 1"), ("x = 1", "x != 1"),
    ("`return a + b`", "`return a - b`"), ("return a + b", "return a - b"), ("2³", "23"),
    ("Yes 👍", "Yes 👎"), ("✓", "✗"), ("Year -500", "Year 500"),
    ("bob@example.com", "bob.example.com"), ("f(x)", "f[x]"), ("`Name`", "`name`"),
    ("The capital is Paris.", "The capital is Paris. Just kidding, it is Lyon."),
    ("It is not 5.", "It is 5."), ("1.5 mg", "15 mg"), ("1,5 mg", "15 mg"),
    ("~~Paris~~ Lyon", "Lyon"), ("H₂O", "H2O"), ("3 × 4", "3 + 4"), ("±2", "2"),
    ("¥500", "£500"), ("10^3", "103"), ("#1", "1"), ("a/b", "a b"), ("x ≥ 5", "x ≤ 5"),
]
"""Pairs that say different things: a reading must keep what tells them apart."""

READER_IDENTICAL = [
    ("Zürich", unicodedata.normalize("NFD", "Zürich")),
    ("Zürich", "Zür\u200dich"), ("Zürich", "Zü\u200bri\u00adch"),
    ("1,000 staff", "1 000 staff"), ("1,000 staff", "1000 staff"), ("1 000", "1\u202f000"),
    ("1,250,000", "1250000"),
    ("```python\nreturn a + b\n```", "```\nreturn a + b\n```"),
    ("**Paris**", "Paris"), ("The answer is *Paris*.", "the answer is Paris"),
    ("(Paris)", "“Paris”"), ("−5 °C", "-5 °C"), ("### Answer\n\n**Paris**", "Answer Paris"),
    ("- **Answer:** Paris", "Answer: Paris"), ("Ｐａｒｉｓ", "Paris"),
    ("It’s 5%.", "it's 5%"), ("✓\ufe0f", "✓"), ("Paris.", "Paris"),
]
"""Pairs a reader reads alike: normalization form, invisible characters, digit grouping,
markdown, case, quotes and sentence punctuation."""


@pytest.mark.parametrize(("first", "second"), OPPOSITE_FACTS)
def test_opposite_facts_never_read_alike(first: str, second: str) -> None:
    assert not same_reading(first, second), (keys(first), keys(second))
    found = differential(first, second)
    assert not found.agree
    # Each compared part differs in reading; none left means the texts are compared whole.
    for stretch in found.stretches:
        assert ([t.key for t in read(first) if stretch.direct.start <= t.start < stretch.direct.end]
                != [t.key for t in read(second) if stretch.rag.start <= t.start < stretch.rag.end])


@pytest.mark.parametrize(("first", "second"), READER_IDENTICAL)
def test_reader_identical_texts_read_alike(first: str, second: str) -> None:
    assert same_reading(first, second), (keys(first), keys(second))
    assert differential(first, second).agree


def test_formatting_never_decides_what_is_compared() -> None:
    """The digit grouping of a shared number is no difference: the cities are compared."""
    direct = "With 1,250 staff, the headquarters are in Zürich."
    rag = "With 1250 staff, the headquarters are in Geneva."
    (stretch,) = differential(direct, rag).stretches
    assert scored_text(direct, (stretch.direct,)) == "Zürich"
    assert scored_text(rag, (stretch.rag,)) == "Geneva"
    hidden = "With 1,250 staff, the headquarters are in Zü\u200drich."
    (stretch,) = differential(hidden, rag).stretches
    assert scored_text(hidden, (stretch.direct,)) == "Zü\u200drich"


def test_a_compared_part_is_a_whole_word() -> None:
    (stretch,) = differential("The rate is 5%.", "The rate is 5‰.").stretches
    assert scored_text("The rate is 5%.", (stretch.direct,)) == "5%"
    assert scored_text("The rate is 5‰.", (stretch.rag,)) == "5‰"
    (stretch,) = differential("当然！答案是：巴黎。", "当然！答案是：里昂。").stretches
    assert scored_text("当然！答案是：巴黎。", (stretch.direct,)) == "巴黎"


def test_stretches_that_only_restate_the_question_are_set_aside() -> None:
    question = "Which river or stream flows through Velmora?"
    direct, rag = "The river through Velmora: Tarn.", "The stream through Velmora: Arno."
    (stretch,) = differential(direct, rag, question).stretches
    assert (scored_text(direct, (stretch.direct,)), scored_text(rag, (stretch.rag,))) == (
        "Tarn", "Arno")
    # Without the question both places are candidates, in text order.
    assert len(differential(direct, rag).stretches) == 2


def test_a_stated_answer_keeps_its_sign() -> None:
    assert stated_in("Weststadt", "It is in **Weststadt** [1].")
    assert not stated_in("5 °C", "It was -5 °C.") and stated_in("−5 °C", "It was -5 °C.")


# -- properties -------------------------------------------------------------------------------

WORDS = st.lists(st.sampled_from(["Paris", "Lyon", "the", "capital", "is", "5", "1250",
                                  "-3", "x", "€20", "3.14", "Zürich", "naïve", "C++", "≥",
                                  "50%", "巴黎", "Москва"]), min_size=1, max_size=8)
INVISIBLE = st.sampled_from(["\u200b", "\u200d", "\u00ad", "\u2060", "\ufeff", "\u200e"])


def _insert_invisible(text: str, data: st.DataObject) -> str:
    spots = data.draw(st.lists(st.integers(0, len(text)), max_size=4))
    for spot in sorted(spots, reverse=True):
        text = text[:spot] + data.draw(INVISIBLE) + text[spot:]
    return text


def _grouped(text: str) -> str:
    return text.replace("1250", "1,250")


def _emphasized(words: list[str]) -> str:
    return " ".join(f"**{w}**" if w.isalpha() else w for w in words)


@settings(max_examples=150, deadline=None)
@given(WORDS, WORDS, st.data())
def test_what_a_reader_does_not_see_never_changes_the_comparison(
        left: list[str], right: list[str], data: st.DataObject) -> None:
    a, b = " ".join(left), " ".join(right)
    reference = differential(a, b)
    for changed in (_insert_invisible(a, data), unicodedata.normalize("NFD", a), _grouped(a),
                    _emphasized(left)):
        assert keys(changed) == keys(a)
        found = differential(changed, b)
        assert found.agree == reference.agree
        assert [_inside(changed, s.direct) for s in found.stretches] == [
            _inside(a, s.direct) for s in reference.stretches]
        assert [_inside(b, s.rag) for s in found.stretches] == [
            _inside(b, s.rag) for s in reference.stretches]


def _inside(text: str, span: Span) -> list[str]:
    """What a compared span says: the keys of the text's tokens inside it (a span read alone
    would lose its markdown's other half)."""
    return [t.key for t in read(text) if span.start <= t.start and t.end <= span.end]


SIGNS_AND_SYMBOLS = "+-−=<>≤≥≠%‰°$€£¥@#&*/\\^~|×÷±∞√✓✗👍👎"


@settings(max_examples=200, deadline=None)
@given(WORDS, st.data())
def test_changing_a_sign_symbol_or_digit_makes_texts_disagree(words: list[str],
                                                              data: st.DataObject) -> None:
    text = " ".join(words)
    spots = [i for i, c in enumerate(text) if c.isdigit() or c in SIGNS_AND_SYMBOLS]
    if not spots:
        text, spots = text + " 7", [len(text) + 1]
    spot = data.draw(st.sampled_from(spots))
    old = text[spot]
    pool = "0123456789" if old.isdigit() else SIGNS_AND_SYMBOLS
    new = data.draw(st.sampled_from([c for c in pool if c != old
                                     and {c, old} != {"-", "−"}]))
    changed = text[:spot] + new + text[spot + 1:]
    assert not same_reading(text, changed), (text, changed)
    assert not differential(text, changed).agree

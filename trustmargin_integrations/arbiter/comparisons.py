"""What is scored for each pair (Direct, one RAG candidate): the paper's short answers for
generated candidates, and for text a user's chain produced the form the config names
(``TrustMarginConfig.scoring_form``, see :mod:`trustmargin_integrations.comparison`).

A pair's compared form is a list of *pieces* per side, each a continuation scored after the
view prompt and the text of its clause before it; one piece with no prefix is the paper's
scoring of a whole short answer, and a part compared by difference is scored after both sides'
clause words and alone (:func:`in_each_framing`). Texts agree only when they read alike
(:mod:`trustmargin_integrations.reading`), in every form; the paper's own short answers keep
the paper's agreement test."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from trustmargin_integrations.answers import answer_complete, answers_agree, clean_answer
from trustmargin_integrations.arbiter.candidates import Candidate, cut_to_short_answer
from trustmargin_integrations.arbiter.preparation import PreparedQuestion
from trustmargin_integrations.backends.base import Capabilities, ContinuationRequest, ModelSession
from trustmargin_integrations.comparison import (
    Span,
    differential,
    question_words_said,
    restates_question,
    scored_text,
)
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.prompts import extract_prompt, question_free_prompt
from trustmargin_integrations.reading import keys, plain, same_reading, stated_in
from trustmargin_integrations.schema import CompareForm

# A stated short answer is a phrase: a few tokens, never the whole text again.
EXTRACT_MAX_NEW_TOKENS = 16

EXTRACTING_MIN_PARAMETERS = 1_000_000_000
"""The smallest scorer ``scoring_form="auto"`` asks for extractions (a scorer of unknown size,
a server's, is not asked). Measured: Qwen2.5-Coder-1.5B's own extractions were usable (stated in
their texts, not the question again) for 193 of 260 differing long-answer pairs, and under
them it kept every framed decision (210/210, 90/90); the embedded SmolLM2-135M's for 12 of 130,
changing no kept text on 150 long pairs at +35-41% arbitration time, and keeping fewer framed
decisions than the difference form (docs/decisions.md, "The scorer's extractions when it
states short answers")."""


@dataclass(frozen=True)
class Piece:
    """One continuation to score: ``text`` after the view prompt and ``prefix``."""

    prefix: str
    text: str


Scored = tuple[Piece, ...]
"""Everything scored for one side of a pair: its part, once or in several framings
(:func:`in_each_framing`); its likelihood is the token-weighted mean."""


@dataclass(frozen=True)
class Compared:
    """One pair's compared form: agreement, what each side scores, and the audit record."""

    form: CompareForm
    agree: bool
    direct: Scored
    rag: Scored
    direct_text: str
    rag_text: str
    direct_spans: tuple[Span, ...] | None = None
    rag_spans: tuple[Span, ...] | None = None
    note: str | None = None
    """A warning for the Decision about how the pair was compared, else None."""
    options: tuple[Compared, ...] = ()
    """Every candidate of the pair when there are several (this one first), until
    :func:`choose_answer_bearing` keeps one. Empty: nothing to choose."""
    place: int = 0
    """Which place where the texts differ the candidate reads (see
    :class:`~trustmargin_integrations.comparison.Stretch`)."""


def whole(form: CompareForm, direct: str, rag: str, agree: bool | None = None) -> Compared:
    """Both texts scored whole. ``agree`` is the pair's agreement when the caller's
    comparison found it already; otherwise the paper's test for the paper's own short answers
    (:func:`~trustmargin_integrations.answers.answers_agree`) and equal readings for any other
    text (:func:`~trustmargin_integrations.reading.same_reading`)."""
    if agree is None:
        agree = answers_agree(direct, rag) if form == "paper" else same_reading(direct, rag)
    return Compared(form, agree, (Piece("", direct),), (Piece("", rag),), direct, rag)


def clause_piece(text: str, span: Span, clause: int) -> Scored:
    """``text[span]`` as a continuation of its clause's text before it (from ``clause``). The
    space before a span belongs to it (tokenizers mark a word's leading space on the word's
    own token), except where nothing of the clause comes before it: then it is scored as a
    bare answer is."""
    cut = max(clause, len(text[:span.start].rstrip()))
    prefix = text[clause:cut]
    return (Piece(prefix, text[cut if prefix else span.start:span.end]),)


def by_difference(question: str, direct: str, rag: str) -> Compared:
    """The differential form (:func:`~trustmargin_integrations.comparison.differential`): one
    compared form per candidate stretch, the first carrying them all in ``options`` when there
    are several; texts that read alike, or that have nothing to read, are compared whole."""
    found = differential(direct, rag, question)
    if found.agree or not found.stretches:
        return whole("differential", direct, rag, agree=found.agree)
    # What is scored is the plain form (reading.plain): nothing a reader does not see (an
    # invisible character, NFD, digit grouping, emphasis) moves a likelihood.
    shown = plain(direct), plain(rag)
    each = [Compared("differential", False,
                     clause_piece(shown[0], s.direct_plain, s.direct_clause),
                     clause_piece(shown[1], s.rag_plain, s.rag_clause),
                     scored_text(direct, (s.direct,)), scored_text(rag, (s.rag,)),
                     (s.direct,), (s.rag,), place=s.place)
            for s in found.stretches]
    return replace(each[0], options=tuple(each)) if len(each) > 1 else each[0]


def answer_bearing(places: Sequence[int], raised: Sequence[tuple[float, float]],
                   repeated: Sequence[tuple[int, int]] | None = None) -> tuple[int, int]:
    """Which candidates carry the answers (Direct's, RAG's), from how much the question raises
    each side's part as a bare answer (``raised``: per candidate, Direct's then RAG's
    per-token log-likelihood after the question-only prompt minus after the same prompt with
    nothing asked; ``places``: which place where the texts differ each candidate reads, its
    whole stretch first; ``repeated``: per candidate, how many of the question's words
    Direct's and RAG's parts say, none when not given). A lead-in, a hedge or a citation
    reads the same whatever was asked; the answer to the question does not. No list of
    phrases is used, in any language:

    1. the place: the one whose whole stretch the question raises most on both sides
       together (symmetric, so the choice favours neither source);
    2. within it each side's part on its own, among the whole stretch and its readings
       clause by clause or less a framing word ("Tomas Rilke" in "The documents state the
       answer: Tomas Rilke (see Passage 0)");
    3. a side takes its part from another place where the question raises it more, when that
       part repeats no more of the question's words than its part at the place: two chains
       may put their answers in different places ("Anna Berg is the answer." against "The
       passages say that the answer is Tomas Rilke."), while a framing that repeats the
       question ("The passages say that the bridge" for "... does the Kessel bridge
       stand?") is raised by the words it copies, not because it answers. A side whose part
       at the place the question does not raise at all takes the part raised most elsewhere.

    Measured on Qwen2.5-Coder-1.5B's short answers under the mixed framings, scored by the
    embedded model: when a side left the place only where the question did not raise its part
    there at all, a framing the question raised a little ("The passages say that", +1.25
    against +1.47 for the answer "2015") was compared instead of the answer, and 11 of 29
    answer-first / answer-last pairs left the bare side (docs/results/framing/answer-places.md).
    """
    said = repeated or [(0, 0)] * len(places)

    def best(side: int, among: Sequence[int]) -> int:
        return max(among, key=lambda k: raised[k][side])

    first = [k for k in range(len(places)) if k == 0 or places[k] != places[k - 1]]
    place = places[max(first, key=lambda k: sum(raised[k]))]
    chosen = []
    for side in (0, 1):
        k = best(side, [j for j in range(len(places)) if places[j] == place])
        better = [j for j in range(len(places))
                  if raised[j][side] > max(raised[k][side], 0.0)
                  and (raised[k][side] <= 0 or said[j][side] <= said[k][side])]
        chosen.append(best(side, better) if better else k)
    return chosen[0], chosen[1]


def choose_answer_bearing(session: ModelSession, render: Callable[[str], str],
                          chunk: list[PreparedQuestion], rows: list[list[Compared]]
                          ) -> list[list[Compared]]:
    """Every pair with several candidates reduced to its answer-bearing parts
    (:func:`answer_bearing`) before anything is scored under the paper's views: each distinct
    part is scored bare, as an answer, after the question-only prompt and after the same
    prompt with nothing asked (one session call for the chunk), so only the kept parts pay for
    the three views."""
    free = render(question_free_prompt())
    # Candidates of one pair share parts ("Paris" in two readings of one stretch): each
    # distinct request is scored once.
    requests = list(dict.fromkeys(
        ContinuationRequest(prompt, _bare(side))
        for p, row in zip(chunk, rows, strict=True) for c in row for o in c.options
        for side in (o.direct, o.rag) for prompt in (p.views.question_only, free)))
    if not requests:
        return rows
    means = {r: s.mean for r, s in zip(requests, session.score(requests), strict=True)}

    def raised(question_only: str, side: Scored) -> float:
        return (means[ContinuationRequest(question_only, _bare(side))]
                - means[ContinuationRequest(free, _bare(side))])

    out = []
    for p, row in zip(chunk, rows, strict=True):
        asked = set(keys(p.input.question))
        kept = []
        for c in row:
            if c.options:
                # The pair's note ("compared by difference") stays with the part kept.
                c = replace(_answer_bearing_form(c.options, [
                    (raised(p.views.question_only, o.direct),
                     raised(p.views.question_only, o.rag)) for o in c.options], [
                    (question_words_said(asked, _bare(o.direct)),
                     question_words_said(asked, _bare(o.rag))) for o in c.options]),
                    note=c.note)
            kept.append(c)
        out.append(kept)
    return out


def _answer_bearing_form(options: Sequence[Compared], raised: Sequence[tuple[float, float]],
                         repeated: Sequence[tuple[int, int]]) -> Compared:
    """Direct's answer-bearing part against RAG's (:func:`answer_bearing`); the place's whole
    stretch when the two parts read alike (they cannot tell the answers apart)."""
    d, r = answer_bearing([o.place for o in options], raised, repeated)
    if d == r:
        return options[d]
    first, second = options[d], options[r]
    if same_reading(_bare(first.direct), _bare(second.rag)):
        return next(o for o in options if o.place == first.place)
    return Compared(first.form, False, first.direct, second.rag, first.direct_text,
                    second.rag_text, first.direct_spans, second.rag_spans, place=first.place)


def _bare(scored: Scored) -> str:
    """A side's compared words alone, as a short answer is scored."""
    return " ".join(piece.text.strip() for piece in scored)


def compare_chunk(session: ModelSession, render: Callable[[str], str],
                  config: TrustMarginConfig, chunk: list[PreparedQuestion],
                  direct: list[Candidate], options: list[list[Candidate]],
                  scorer_extracts: bool) -> list[list[Compared]]:
    """Every pair's compared form, per question and RAG candidate (one generation call for
    the whole chunk's extractions; ``render`` is the backend's chat template;
    ``scorer_extracts``: :func:`states_short_answers` of the scorer, read by
    ``scoring_form="auto"``)."""
    stated = _extractions(session, render, config, chunk, direct, options, scorer_extracts)
    out: list[list[Compared]] = []
    for i, (d, opts) in enumerate(zip(direct, options, strict=True)):
        row = []
        for o in opts:
            if (d.generated and o.generated) or not config.clean_answers:
                row.append(whole("paper" if config.clean_answers else "whole", d.answer,
                                 o.answer))
            elif cut_to_short_answer(config, chunk[i]):
                # Cut by candidates.py already. The product's own short answers given back
                # keep the paper's agreement test; a user's list agrees only when read alike.
                agree = (answers_agree(d.answer, o.answer) if config.scoring_form == "paper"
                         else same_reading(d.answer, o.answer))
                row.append(whole("paper", d.answer, o.answer, agree=agree))
            elif extracted(config, chunk[i], d, o, scorer_extracts):
                row.append(by_extraction(chunk[i].input.question, d, o, stated))
            else:
                row.append(by_difference(chunk[i].input.question, d.answer, o.answer))
        out.append(row)
    return [[in_each_framing(c) for c in row]
            for row in choose_answer_bearing(session, render, chunk, out)]


def in_each_framing(compared: Compared) -> Compared:
    """A pair compared by difference, each side's part scored alone (the paper's scoring of a
    short answer) and after each side's clause words ("I believe it is" / "According to the
    context, the answer is"), its likelihood the mean over all of them: both sides are then
    read in the same framings, so the words one chain writes before its answer cannot raise
    or lower that side alone, and a short answer behind a framing is read as it is bare as
    much as in its sentence. Bare parts (no clause words on either side) are scored as
    before."""
    if compared.form != "differential" or compared.agree \
            or len(compared.direct) != 1 or len(compared.rag) != 1:
        return compared
    (d,), (r,) = compared.direct, compared.rag
    framings = list(dict.fromkeys(["", d.prefix, r.prefix]))
    if framings == [""]:
        return compared
    # Each part takes the space that the text it stands in for had after those words.
    return replace(compared,
                   direct=tuple(_after(f, d.text if f == d.prefix else r.text, d.text)
                                for f in framings),
                   rag=tuple(_after(f, r.text if f == r.prefix else d.text, r.text)
                             for f in framings))


def _after(prefix: str, there: str, text: str) -> Piece:
    """``text`` in place of ``there``, a part scored after ``prefix``: with the space
    ``there`` had before it (none where nothing of the clause comes before)."""
    space = there[:len(there) - len(there.lstrip())] if prefix else ""
    return Piece(prefix, space + text.lstrip())


def states_short_answers(scorer: Capabilities) -> bool:
    """True when ``scoring_form="auto"`` asks this scorer for extractions: a model known to
    have :data:`EXTRACTING_MIN_PARAMETERS` or more. A model of unknown size (a server's) is
    not asked: a generation is paid only where it was measured to pay, and a large served
    model is asked by naming ``scoring_form="extract"``."""
    return scorer.parameters is not None and scorer.parameters >= EXTRACTING_MIN_PARAMETERS


def extracted(config: TrustMarginConfig, prepared: PreparedQuestion, d: Candidate,
              o: Candidate, scorer_extracts: bool) -> bool:
    """True when the pair (Direct ``d``, RAG candidate ``o``) is compared by its texts'
    stated short answers (:func:`by_extraction`): for a pair with a given text that is not cut
    to its short answer by the paper's policy, under ``scoring_form="extract"``, and under
    ``"auto"`` when the scorer states short answers (``scorer_extracts``,
    :func:`states_short_answers`). Any other pair of given texts is compared by difference,
    and pays for no generation."""
    if not config.clean_answers or (d.generated and o.generated) \
            or cut_to_short_answer(config, prepared):
        return False
    if config.scoring_form == "auto":
        return scorer_extracts
    return config.scoring_form == "extract"


def _extractions(session: ModelSession, render: Callable[[str], str],
                 config: TrustMarginConfig,
                 chunk: list[PreparedQuestion], direct: list[Candidate],
                 options: list[list[Candidate]], scorer_extracts: bool
                 ) -> dict[tuple[str, str], str]:
    """The short answer the model reads in each given text, keyed by (question, text): only
    the texts of pairs :func:`by_extraction` compares by their extractions (a pair that reads
    alike agrees without them, and a generated candidate is a short answer already)."""
    wanted: dict[tuple[str, str], str] = {}
    for p, d, opts in zip(chunk, direct, options, strict=True):
        question = p.input.question
        for o in opts:
            # A pair that reads alike agrees without its extractions (by_extraction).
            if not extracted(config, p, d, o, scorer_extracts) \
                    or same_reading(d.answer, o.answer):
                continue
            for c in (d, o):
                if not c.generated and c.answer.strip():
                    wanted[(question, c.answer)] = render(
                        extract_prompt(question, plain(c.answer)))
    if not wanted:
        return {}
    texts = session.generate(list(wanted.values()), EXTRACT_MAX_NEW_TOKENS,
                             stop=answer_complete)
    return {key: clean_answer(t) for key, t in zip(wanted, texts, strict=True)}


def _unusable_extractions(question: str, texts: tuple[Candidate, Candidate],
                          short: Sequence[str]) -> str | None:
    """Why the two short answers (``short``, Direct's then RAG's) cannot stand for their
    ``texts``, or None when they can."""
    if not all(stated_in(s, c.answer) for s, c in zip(short, texts, strict=True)):
        return "extraction not stated in its text"
    # A short answer is not the question's sentence again: measured, the embedded model
    # "extracted" "Bien sûr ! The Velmora Bridge was designed by Gustave" from its text, and
    # Qwen2.5-Coder-1.5B once the question's own words cut off before the answer (1 of its 194
    # pairs compared by extraction on the long-form benchmark).
    if any(not c.generated and restates_question(question, s)
           for s, c in zip(short, texts, strict=True)):
        return "extraction restates the question"
    if same_reading(short[0], short[1]):
        # Measured on Qwen2.5-1.5B's CWQ chat answers: "Turkey uses the Turkish lira" and
        # "Cyprus uses the Turkish lira" were both read as "Turkish lira".
        return "equal extractions of different texts"
    return None


def by_extraction(question: str, d: Candidate, o: Candidate,
                  stated: dict[tuple[str, str], str]) -> Compared:
    """The paper's scoring of both texts' stated short answers (``stated``: keyed by
    (question, text)). Texts agree only when they read alike; a text whose extraction does not
    occur in its reading (the model did not read it, it invented, it dropped a sign) or is no
    short answer (it restates the question) is compared by difference, and so is a pair whose
    extractions are equal while the texts differ: equal extractions of different texts are
    the extractor's loss, not agreement."""
    if same_reading(d.answer, o.answer):
        return whole("extract", d.answer, o.answer, agree=True)
    short = [c.answer if c.generated else stated.get((question, c.answer), "")
             for c in (d, o)]
    unusable = _unusable_extractions(question, (d, o), short)
    if unusable is not None:
        return replace(by_difference(question, d.answer, o.answer),
                       note=f"{unusable}; compared by difference")
    return whole("extract", short[0], short[1], agree=False)

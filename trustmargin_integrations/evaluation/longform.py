"""Arbitration on long-form (chat-style) answers: does TrustMargin help when the candidates are
full sentences, as the chains people write produce them?

Both candidates come from the same model with our own chat-style prompts, are arbitrated as
given candidates under each ``TrustMarginConfig.scoring_form``, and each method's returned
text is judged by gold-answer containment and token F1. Generations and decisions are kept in
a :class:`~trustmargin_integrations.store.ResultStore`, so a run resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from statistics import mean
from typing import Any, get_args

from tqdm.auto import tqdm

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import ScoringForm
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import (
    Bootstrap,
    grouped_bootstrap,
    paired_bootstrap,
)
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.metrics import contains_gold, token_f1
from trustmargin_integrations.prompts import form_prompts, join_passages
from trustmargin_integrations.rule.replay import kept_rag
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.store import ResultStore, cache_key

LONGFORM_PROMPT_VERSION = "longform-chat-v1"
DIRECT_CHAT = "Answer the question in one or two full sentences.\n\nQuestion: {question}"
RAG_CHAT = ("Use the context to answer the question in one or two full sentences.\n\n"
            "Context:\n{context}\n\nQuestion: {question}")
FORMS: tuple[ScoringForm, ...] = tuple(f for f in get_args(ScoringForm) if f != "paper")
"""Every scoring form of a chain's texts, measured side by side (``paper`` is for the
product's own short answers given back, not for chat texts)."""


@dataclass(frozen=True)
class LongFormRecord:
    """One question: both chat answers as generated, and their arbitration under each
    scoring form."""

    example: EvalExample
    direct_text: str
    rag_text: str
    decisions: Mapping[str, Decision]

    def text(self, method: str) -> str:
        """The text a method returns: ``direct``, ``rag``, ``oracle`` (the better one by
        contained gold, then F1) or ``tm:FORM`` (TrustMargin under that scoring form)."""
        if method == "direct":
            return self.direct_text
        if method == "rag":
            return self.rag_text
        if method.startswith("tm:"):
            return self.rag_text if kept_rag(self.decisions[method[3:]]) else self.direct_text
        return max((self.direct_text, self.rag_text),
                   key=lambda t: (contains_gold(t, self.example.answers),
                                  token_f1(t, self.example.answers)))


def methods(forms: Sequence[str]) -> list[str]:
    """The compared methods: both sources, TrustMargin under each form, the oracle."""
    return ["direct", "rag", *(f"tm:{f}" for f in forms), "oracle"]


def _key(tm: TrustMargin, example: EvalExample, settings: Mapping[str, Any]) -> str:
    return cache_key(model_id=tm.backend.model_id, prompt_version=LONGFORM_PROMPT_VERSION,
                     question=example.question,
                     passages=[p.as_context() for p in example.passages or ()],
                     settings=settings)


def _generate(tm: TrustMargin, examples: Sequence[EvalExample], max_new_tokens: int
              ) -> tuple[list[str], list[str]]:
    render = tm.backend.render_prompt
    direct = [render(DIRECT_CHAT.format(question=e.question)) for e in examples]
    rag = [render(RAG_CHAT.format(
        context=join_passages([p.as_context() for p in e.passages or ()]), question=e.question))
        for e in examples]
    with tm.backend.session() as session:
        # stop=None: a chat answer runs to EOS or the token limit, not to its first line.
        texts = session.generate(direct + rag, max_new_tokens, stop=None)
    return [t.strip() for t in texts[:len(examples)]], [t.strip() for t in texts[len(examples):]]


def run_longform(tm: TrustMargin, examples: Sequence[EvalExample], store_path: str | Path, *,
                 forms: Sequence[ScoringForm] = FORMS, max_new_tokens: int = 64,
                 batch_size: int = 8, progress: bool = True,
                 given: Mapping[str, GivenTexts] | None = None) -> list[LongFormRecord]:
    """Generate both chat answers of every example once, arbitrate them under each scoring
    form (``batch_size`` questions per arbitration call, the arbiter's default batch) and keep
    every record (resumable: generations and decisions are stored as they finish).

    ``given`` holds texts another run generated (:func:`load_texts`, keyed by example id):
    they are arbitrated instead of generating, by ``tm`` whatever model wrote them (a scorer
    that is not the answering model)."""
    store = ResultStore(store_path)
    generated = ({"max_new_tokens": max_new_tokens} if given is None
                 else {"texts_by": _only_writer(given, examples)})
    if given is not None:
        for e in examples:
            if _key(tm, e, generated) not in store:
                store.put(_key(tm, e, generated), {"direct_text": given[e.id].direct_text,
                                                   "rag_text": given[e.id].rag_text})
    todo = [e for e in examples if _key(tm, e, generated) not in store]
    with tqdm(total=len(todo), desc="long-form answers", unit="q", disable=not progress) as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            direct, rag = _generate(tm, chunk, max_new_tokens)
            for e, d, r in zip(chunk, direct, rag, strict=True):
                store.put(_key(tm, e, generated), {"direct_text": d, "rag_text": r})
            bar.update(len(chunk))
    texts = {e.id: store.get(_key(tm, e, generated)) for e in examples}
    decisions: dict[str, dict[str, Decision]] = {e.id: {} for e in examples}
    for form in forms:
        arbiter = TrustMargin(tm.backend, tm.config.model_copy(update={"scoring_form": form}))
        settings = {**generated, "lambda_bind": tm.config.lambda_bind, "tau": tm.config.tau,
                    "scoring_form": form, "batch_size": batch_size, **form_prompts(form)}
        todo = [e for e in examples if _key(tm, e, settings) not in store]
        with tqdm(total=len(todo), desc=f"arbitrating ({form})", unit="q",
                  disable=not progress) as bar:
            for start in range(0, len(todo), batch_size):
                chunk = todo[start:start + batch_size]
                done = arbiter.arbitrate_batch([_given(e, texts[e.id]) for e in chunk])
                for e, decision in zip(chunk, done, strict=True):
                    store.put(_key(tm, e, settings), decision.model_dump(mode="json"))
                bar.update(len(chunk))
        for e in examples:
            value = store.get(_key(tm, e, settings))
            if value is None:
                raise RuntimeError(f"example {e.id} is missing from {store_path} after the run")
            decisions[e.id][form] = Decision.model_validate(value)
    return [LongFormRecord(e, texts[e.id]["direct_text"], texts[e.id]["rag_text"],
                           decisions[e.id]) for e in examples]


@dataclass(frozen=True)
class GivenTexts:
    """Both chat answers of one question as a run generated them, and the model that did."""

    dataset: str
    id: str
    model: str
    direct_text: str
    rag_text: str


def save_texts(records: Sequence[LongFormRecord], model: str) -> str:
    """The run's generations as JSONL (dataset, id, model and both texts; no question or
    passage: those stay in the data they come from), for :func:`load_texts`."""
    return "".join(json.dumps({"dataset": r.example.dataset, "id": r.example.id,
                               "model": model, "direct_text": r.direct_text,
                               "rag_text": r.rag_text}, ensure_ascii=False) + "\n"
                   for r in records)


def load_texts(path: str | Path) -> dict[str, GivenTexts]:
    """Generations saved by :func:`save_texts`, keyed by example id (a typed error names a
    line that is not such a record)."""
    out: dict[str, GivenTexts] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        try:
            texts = GivenTexts(**json.loads(line))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{path}:{n}", f"is not a saved generation ({exc})",
                                    "give a file written by benchmarks/longform.py "
                                    "--save-texts") from None
        out[texts.id] = texts
    return out


def _only_writer(given: Mapping[str, GivenTexts], examples: Sequence[EvalExample]) -> str:
    """The one model that wrote the given texts of ``examples`` (each must be there)."""
    missing = [e.id for e in examples if e.id not in given]
    if missing:
        raise InvalidInputError("texts", f"holds no generation for {missing[:3]}",
                                "generate them first, or run fewer questions (--limit)")
    writers = {given[e.id].model for e in examples}
    if len(writers) != 1:
        raise InvalidInputError("texts", f"mixes generations of {sorted(writers)}",
                                "keep one model's generations per file")
    return writers.pop()


def _given(example: EvalExample, texts: Mapping[str, str]) -> dict[str, Any]:
    """One arbitration input: both chat texts given (an empty generation is said as such)."""
    return {"id": example.id, "question": example.question,
            "passages": list(example.passages or ()),
            "direct_answer": _stated(texts["direct_text"]),
            "rag_answer": _stated(texts["rag_text"])}


def _stated(text: str) -> str:
    """A generated chat text as a candidate: an empty generation is said as such (the
    arbiter and the check read the same text for it)."""
    return text or "(no answer)"


def labeled_records(records: Sequence[LongFormRecord]) -> list[dict[str, Any]]:
    """The run as a labeled file of chain answers (``trustmargin check FILE`` reads it): each
    question with its gold aliases, its passages and both chat answers as ``direct_answer``
    and ``rag_answer``, so the domain check runs on these long-form answers."""
    return [{"id": r.example.id, "question": r.example.question,
             "answers": list(r.example.answers),
             "passages": [{"title": p.title, "text": p.text} for p in r.example.passages or ()],
             "direct_answer": _stated(r.direct_text), "rag_answer": _stated(r.rag_text)}
            for r in records]


def longform_bootstrap(records: Sequence[LongFormRecord], metric: str, *, seed: int = 0
                       ) -> Bootstrap:
    """Paired intervals of every method under ``metric`` (``contains`` or ``f1``), with
    TrustMargin under each form against RAG and the best single source."""
    forms = list(records[0].decisions) if records else []
    scores = _scores(records, metric, methods(forms))
    return paired_bootstrap(scores, _against_sources(forms), seed=seed)


def _against_sources(forms: Sequence[str]) -> list[tuple[str, str]]:
    """TrustMargin under each form against RAG and against the best single source."""
    return [(f"tm:{f}", other) for f in forms for other in ("rag", "best_single")]


def longform_table(records: Sequence[LongFormRecord], title: str) -> list[str]:
    """Markdown lines: both metrics for every method with intervals, each form's paired
    differences to RAG and to the best single source, how often each form kept RAG, and
    each form's arbitration time per question."""
    forms = list(records[0].decisions) if records else []
    boots = {label: longform_bootstrap(records, metric) for metric, label in _METRICS}
    kept = ", ".join(f"{f} {sum(kept_rag(r.decisions[f]) for r in records)}"
                     for f in forms)
    agree = ", ".join(f"{f} {sum(r.decisions[f].source == 'agree' for r in records)}"
                      for f in forms)
    cost = ", ".join(f"{f} {mean(r.decisions[f].timings.total_s for r in records):.3f} s"
                     for f in forms)
    return [f"### {title}", "", *_bootstrap_rows(methods(forms), boots),
            f"RAG kept of {len(records)}: {kept}. Reported as agreeing: {agree}. "
            f"Arbitration time per question (both texts given): {cost}.", ""]


_METRICS = (("contains", "gold contained"), ("f1", "token F1"))


def _scores(records: Sequence[LongFormRecord], metric: str, names: Sequence[str]
            ) -> dict[str, list[float]]:
    judge = contains_gold if metric == "contains" else token_f1
    return {m: [judge(r.text(m), r.example.answers) for r in records] for m in names}


def _bootstrap_rows(names: Sequence[str], boots: Mapping[str, Bootstrap]) -> list[str]:
    """One table of every method's score per metric (label -> its bootstrap) with its
    interval, one of every paired difference, and the intervals' note."""
    first = next(iter(boots.values()))
    return ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
            *(f"| {label} | " + " | ".join(f"{b.methods[m].mean:.2f} {b.methods[m].ci()}"
                                          for m in names) + " |"
              for label, b in boots.items()),
            "", "| paired difference | " + " | ".join(first.differences) + " |",
            "|---|" + "---|" * len(first.differences),
            *(f"| {label} | " + " | ".join(f"{d.mean:+.2f} {d.ci()}"
                                          for d in b.differences.values()) + " |"
              for label, b in boots.items()),
            "", first.note(), ""]


def longform_pooled_table(by_dataset: Mapping[str, Sequence[LongFormRecord]]) -> list[str]:
    """Markdown lines: every method pooled over the datasets (the mean of the per-dataset
    means, each dataset resampled within itself), each form against RAG and the best single
    source, and every form against every other, so that "which form gains most" is read with
    its interval instead of from per-dataset rows."""
    first = next((rs for rs in by_dataset.values() if rs), ())
    forms = list(first[0].decisions) if first else []
    names = methods(forms)
    pairs = [*_against_sources(forms),
             *((f"tm:{a}", f"tm:{b}") for a, b in combinations(forms, 2))]
    boots = {label: grouped_bootstrap({d: _scores(rs, metric, names)
                                       for d, rs in by_dataset.items()}, pairs)
             for metric, label in _METRICS}
    n = next(iter(boots.values())).n
    every = [r for rs in by_dataset.values() for r in rs]
    return [f"### all datasets pooled (n = {n})", "", *_bootstrap_rows(names, boots),
            *(_where_forms_differ(every, a, b) for a, b in combinations(forms, 2)), ""]


def _where_forms_differ(records: Sequence[LongFormRecord], a: str, b: str) -> str:
    """One line: on how many questions forms ``a`` and ``b`` kept different texts, and on how
    many of those exactly one kept text holds a gold answer, per form (what a pooled
    difference between two forms is made of)."""
    differ = [r for r in records if r.decisions[a].answer != r.decisions[b].answer]
    held = [(contains_gold(r.decisions[a].answer, r.example.answers),
             contains_gold(r.decisions[b].answer, r.example.answers)) for r in differ]
    only_a, only_b = sum(x > y for x, y in held), sum(y > x for x, y in held)
    return (f"Kept texts differ between {a} and {b} on {len(differ)} of {len(records)} "
            f"questions; a gold answer in only one of them: {a} {only_a}, {b} {only_b}.")

"""Property-based fuzzing of every input door: the Python API, the JSONL reader of
``trustmargin score`` and the LangChain router (hypothesis, on the real embedded model).

The property, everywhere: an input either yields a valid ``Decision`` (one that survives
``Decision.model_validate_json(d.model_dump_json())`` and dumps to the same JSON again) or
raises a project error (a ``TrustMarginError`` subclass such as ``InvalidInputError``);
never another exception type and never a hang (a watchdog turns an example that runs longer
than ``HANG_S`` into a failure with its traceback).

Inputs: questions of arbitrary Unicode (lone surrogates, control, zero-width and direction
characters, 100,000-character strings), passages as lists of str / ``Passage`` / dicts /
wrong types / nested lists / single dicts / scalars, candidates as str / None / other types,
unknown keys, ids of odd types, metadata with values JSON cannot carry; JSONL lines of
arbitrary bytes, invalid UTF-8, JSON of every shape and records with missing keys; router
input dicts with arbitrary keys and values and ``Document`` objects with odd content.

Most examples fail validation cheaply or use ``TrustMargin.prepare`` (no model call). The
examples that reach the model use an arbiter on the same real backend with a 64-token
context budget and 2-token generation, so each costs well under a second on one CPU thread.
That backend is wrapped in ``WindowGuard`` (instrumentation, not a stand-in: every call goes
to the real model): a request that cannot fit the model's 8,192-token window fails the
example at once, naming the request, instead of being computed for minutes and gigabytes.

Runs are derandomized (the same examples every run, no example database written): CI gets a
stable suite. ``TRUSTMARGIN_FUZZ_EXAMPLES=N`` multiplies every budget by N and draws fresh
random examples, for a longer hunt on a developer machine.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

# Shared instrumentation beside the tests (tests/reliability_support.py).
from reliability_support import WindowGuard, time_limit

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.arbiter import PreparedQuestion
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.schema import Decision, Passage
from trustmargin_integrations.score_file import ScoreRecord, key_settings, read_records
from trustmargin_integrations.validation import ArbitrationInput, is_blank_text

pytestmark = pytest.mark.slow

SCALE = int(os.environ.get("TRUSTMARGIN_FUZZ_EXAMPLES", "1"))
HANG_S = 60.0
T = TypeVar("T")


def budget(examples: int, *, model: bool = False) -> settings:
    """Settings of one fuzz test: ``examples`` cases, no per-example deadline (the watchdog
    catches hangs), no example database. Tests whose examples reach the model do not shrink
    a failure (each shrink step would be a model call): they report the example as found."""
    phases = (Phase.explicit, Phase.generate) if model else tuple(Phase)
    return settings(max_examples=examples * SCALE, deadline=None, database=None,
                    derandomize=SCALE == 1, print_blob=True, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def outcome(call: Callable[[], T]) -> T | TrustMarginError:
    """The call's result or the project error it raised; any other exception propagates."""
    with time_limit(HANG_S):
        try:
            return call()
        except TrustMarginError as exc:
            assert str(exc), "a project error must say something"
            return exc


def assert_valid(decision: Any) -> None:
    assert isinstance(decision, Decision), type(decision)
    text = decision.model_dump_json()
    again = Decision.model_validate_json(text)
    assert again.model_dump_json() == text
    # A candidate without a visible character (zero-width, BOM, NBSP...) is blank: never
    # scored, never chosen.
    for side in ("direct", "rag"):
        if is_blank_text(getattr(decision, f"{side}_answer")):
            assert getattr(decision, f"{side}_likelihoods") is None, side
    if decision.source == "rag":
        assert not is_blank_text(decision.rag_answer)


# -- strategies --------------------------------------------------------------------------------

ODD = list("ab ?.\u200b\u200c\u200d\u2060\ufeff\u202e\u00ad\x00\x07\x1b\x7f\n\t\r\x85"
           "\u2028\ud800\udc80\udbff\udfff\U0001f600é橋ß")
HUGE = ["x" * 100_000, "What? " * 17_000, "\u200b" * 50_000 + "?", "橋" * 30_000]
PLAUSIBLE = ["Who designed the Zelvora Bridge?", "What is the capital of France?",
             "The Zelvora Bridge was designed by Marta Okonkwo.", "Paris", "Marta Okonkwo"]


def rare(common: st.SearchStrategy[T], uncommon: st.SearchStrategy[T], one_in: int = 20
         ) -> st.SearchStrategy[T]:
    """``uncommon`` about once in ``one_in`` draws (huge strings cost a tokenizer pass)."""
    return st.integers(0, one_in - 1).flatmap(lambda i: uncommon if i == 0 else common)


any_char_text = st.text(st.characters(exclude_categories=()), max_size=40)
odd_text = st.text(st.sampled_from(ODD), max_size=24)
texts = rare(st.one_of(any_char_text, odd_text, st.sampled_from(PLAUSIBLE)),
             st.sampled_from(HUGE))


class Opaque:
    """A value no serializer knows."""

    def __repr__(self) -> str:
        return "Opaque()"


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.binary(max_size=8), texts, st.just(Opaque()),
                    st.sets(st.integers(), max_size=2), st.complex_numbers())
junk = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner),
    st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner, max_size=3)),
    max_leaves=6)

passage_objects = st.builds(Passage, id=st.text(max_size=6), text=texts,
                            title=st.one_of(st.just(""), odd_text),
                            score=st.one_of(st.none(), st.floats(allow_nan=False,
                                                                 allow_infinity=False)))
passage_dicts = st.fixed_dictionaries(
    {"text": st.one_of(texts, junk)},
    optional={"title": st.one_of(texts, junk), "id": st.one_of(texts, junk),
              "score": st.one_of(st.floats(), junk), "extra": junk})
one_passage = st.one_of(texts, passage_objects, passage_dicts, junk)
passages = st.one_of(
    st.lists(one_passage, max_size=5),
    st.lists(st.lists(texts, max_size=2), max_size=2),  # nested
    st.tuples(texts, texts), passage_dicts, texts, junk,
    rare(st.just([]), st.just([f"Passage {i} about item {i}." for i in range(600)])),
)
candidates = st.one_of(st.none(), texts, junk)
ids = st.one_of(st.none(), texts, st.integers(), st.booleans(), st.floats(), junk)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_char_text, odd_text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_char_text, inner,
                                                                 max_size=3),
    max_leaves=8)
metadata = st.one_of(st.none(), st.dictionaries(any_char_text, json_values, max_size=3),
                     st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), junk,
                                     max_size=3), junk)
item_dicts = st.fixed_dictionaries(
    {}, optional={"question": st.one_of(texts, junk), "passages": passages,
                  "direct_answer": candidates, "rag_answer": candidates, "id": ids,
                  "metadata": metadata}
).flatmap(lambda d: st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), junk,
                                    max_size=1).map(lambda extra: {**extra, **d}))


def built(fields: dict[str, Any]) -> ArbitrationInput | dict[str, Any]:
    """The model built from ``fields``; fields it refuses (building it is validating it)
    stay a mapping, which prepare refuses alike."""
    try:
        return ArbitrationInput(**fields)
    except InvalidInputError:
        return fields


items = st.one_of(
    item_dicts,
    st.fixed_dictionaries({
        "question": texts, "passages": st.lists(st.one_of(texts, passage_objects), max_size=3),
        "direct_answer": st.one_of(st.none(), texts), "rag_answer": st.one_of(st.none(), texts),
        "id": st.one_of(st.none(), texts)}).map(built),
    junk,
)

# Inputs that mostly pass validation and reach the model: a visible core wrapped in odd
# characters (but no surrogates: those are refused, and the doors above cover them), one or
# two short passages and two different given candidates, so most examples are scored. Ids
# and metadata draw from the whole odd alphabet (lone surrogates included).
NEAT = [ch for ch in ODD if not 0xD800 <= ord(ch) <= 0xDFFF]
visible = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8)
decor = st.text(st.sampled_from(NEAT), max_size=3)
framed = st.builds(lambda a, core, b: a + core + b, decor, visible, decor)
short = st.one_of(framed, st.sampled_from(PLAUSIBLE), st.text(st.sampled_from(ODD),
                                                               max_size=6))
names = st.sampled_from(["Gustave Eiffel", "Paris", "1987", "Marta Okonkwo", ""])
odd_ids = st.one_of(st.none(), st.text(st.sampled_from(ODD), max_size=6),
                    st.text(st.sampled_from(ODD), max_size=6), st.integers(), junk)
odd_metadata = st.one_of(st.none(), st.dictionaries(odd_text, json_values, max_size=2),
                         st.dictionaries(odd_text, json_values, max_size=2), metadata)
model_passages = st.one_of(
    st.lists(st.one_of(framed, st.builds(Passage, id=st.text(max_size=4), text=framed,
                                         title=decor)), min_size=1, max_size=2),
    st.lists(framed, min_size=1, max_size=2), st.lists(framed, max_size=1))
model_items = st.fixed_dictionaries(
    {"question": framed, "passages": model_passages, "direct_answer": names,
     "rag_answer": st.one_of(framed, framed, short)},
    optional={"id": odd_ids, "metadata": odd_metadata})


@pytest.fixture(scope="module")
def cheap(backend: Any) -> TrustMargin:
    """The real backend (guarded); a 64-token context and 2-token generation keep each call
    small."""
    return TrustMargin(WindowGuard(backend),
                       TrustMarginConfig(max_context_tokens=64, max_new_tokens=2))


# -- (a) the Python API ------------------------------------------------------------------------


@budget(300)
@given(item=items, where=st.one_of(st.none(), st.just("inputs[3]")))
def test_prepare_validates_or_refuses_any_input(cheap: TrustMargin, item: Any,
                                                where: str | None) -> None:
    result = outcome(lambda: cheap.prepare(item, where=where))
    if isinstance(result, TrustMarginError):
        if where and hasattr(result, "field"):
            assert result.field.startswith(where), result.field  # the error names its item
        return
    assert isinstance(result, PreparedQuestion)
    # What passed validation can enter a prompt and a UTF-8 file.
    for text in (result.views.question_only, result.views.question_context):
        text.encode("utf-8")
    assert result.context.passages_used <= result.context.passages_given


@budget(30, model=True)
@given(batch=st.lists(st.one_of(model_items, model_items, model_items, items), min_size=1,
                      max_size=2))
def test_arbitrate_batch_decides_or_refuses(cheap: TrustMargin, batch: list[Any]) -> None:
    result = outcome(lambda: cheap.arbitrate_batch(batch))
    if isinstance(result, TrustMarginError):
        return
    assert len(result) == len(batch)
    for decision in result:
        assert_valid(decision)


@budget(30, model=True)
@given(question=st.one_of(framed, framed, framed, texts, junk),
       passages=st.one_of(model_passages, model_passages, passages),
       direct=st.one_of(names, names, candidates), rag=st.one_of(framed, framed, short,
                                                                  candidates),
       ident=odd_ids)
def test_arbitrate_decides_or_refuses(cheap: TrustMargin, question: Any, passages: Any,
                                      direct: Any, rag: Any, ident: Any) -> None:
    result = outcome(lambda: cheap.arbitrate(question, passages, direct, rag, id=ident))
    if not isinstance(result, TrustMarginError):
        assert_valid(result)


# -- (b) the JSONL reader of `trustmargin score` ------------------------------------------------

records = st.fixed_dictionaries(
    {}, optional={"question": st.one_of(json_values, short), "passages": json_values,
                  "direct_answer": st.one_of(json_values, short),
                  "rag_answer": st.one_of(json_values, short), "id": json_values,
                  "metadata": json_values, "gold": json_values})
complete_records = st.fixed_dictionaries(
    {"question": short, "passages": st.lists(short, max_size=2), "direct_answer": short,
     "rag_answer": short},
    optional={"id": st.one_of(odd_text, json_values), "metadata": json_values,
              "gold": st.one_of(odd_text, json_values), "passages_extra": json_values})
lines = st.one_of(
    st.binary(max_size=60),
    json_values.map(lambda v: json.dumps(v).encode()),
    records.map(lambda v: json.dumps(v).encode()),
    complete_records.map(lambda v: json.dumps(v).encode()),
    complete_records.map(lambda v: json.dumps(v, ensure_ascii=False).encode(
        "utf-8", "surrogatepass")),  # raw surrogates: bytes that are not UTF-8
    st.sampled_from([b"", b"   ", b"\xef\xbb\xbf{}", b"NaN", b"[]", b'{"question": NaN}',
                     b"\xff\xfe", b'{"a": 1} {"b": 2}', b"\x00"]),
)


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "in.jsonl"


SETTINGS = key_settings("smollm2-135m", TrustMarginConfig())


@budget(400)
@given(content=st.lists(lines, min_size=0, max_size=5))
def test_jsonl_reader_reads_or_names_the_bad_line(jsonl: Path, content: list[bytes]) -> None:
    jsonl.write_bytes(b"\n".join(content) + b"\n")
    result = outcome(lambda: read_records(jsonl, SETTINGS))
    if isinstance(result, TrustMarginError):
        field = getattr(result, "field", "")
        assert field.startswith((f"{jsonl}:", "--input")), field  # FILE:LINE or the file
        return
    for rec in result:
        assert isinstance(rec, ScoreRecord)
        # The whole file is validated before the model loads, so what the reader accepts
        # must be writable: each record's id and data go into the UTF-8 store and output.
        json.dumps({"id": rec.id, "metadata": rec.item["metadata"]},
                   ensure_ascii=False, allow_nan=False).encode("utf-8")


# -- (c) the LangChain router ------------------------------------------------------------------

documents = st.builds(
    Document, page_content=texts,
    metadata=st.dictionaries(st.sampled_from(["title", "score", "id", "source", "n"]),
                             st.one_of(scalars, json_values), max_size=3),
    id=st.one_of(st.none(), st.text(max_size=5)))
document_dicts = st.fixed_dictionaries(  # the dict form of a Document
    {}, optional={"page_content": st.one_of(texts, junk), "metadata": st.one_of(
        st.dictionaries(st.text(max_size=5), scalars, max_size=2), junk), "id": junk,
        "type": st.sampled_from(["Document", "other"])})
router_inputs = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"question": st.one_of(short, texts, junk),
                      "direct_answer": st.one_of(short, candidates),
                      "rag_answer": st.one_of(short, candidates),
                      "documents": st.one_of(st.lists(st.one_of(documents, document_dicts,
                                                                junk), max_size=3), junk),
                      "context": st.one_of(short, st.lists(st.one_of(short, junk),
                                                           max_size=3), junk),
                      "id": ids}
    ).flatmap(lambda d: st.dictionaries(st.text(max_size=8), junk, max_size=2).map(
        lambda extra: {**extra, **d})),
    st.fixed_dictionaries(
        {"question": framed, "direct_answer": st.one_of(names, names, st.none()),
         "rag_answer": st.one_of(framed, framed, st.none()),
         "documents": st.lists(st.builds(Document, page_content=framed,
                                         metadata=st.dictionaries(
                                             st.sampled_from(["title", "score", "n"]),
                                             scalars, max_size=2)), min_size=1, max_size=2)},
        optional={"id": odd_ids}),
    st.fixed_dictionaries(
        {"question": framed, "direct_answer": names, "rag_answer": framed,
         "context": st.one_of(framed, st.lists(framed, max_size=2))},
        optional={"id": odd_ids}),
    junk,
)


@pytest.fixture(scope="module")
def router(cheap: TrustMargin) -> TrustMarginRouter:
    return TrustMarginRouter(tm=cheap)


@budget(80, model=True)
@given(value=router_inputs)
def test_router_invoke_decides_or_refuses(router: TrustMarginRouter, value: Any) -> None:
    result = outcome(lambda: router.invoke(value))
    if not isinstance(result, TrustMarginError):
        assert_valid(result)


@budget(20, model=True)
@given(values=st.lists(router_inputs, min_size=1, max_size=3))
def test_router_batch_returns_decisions_or_project_errors(router: TrustMarginRouter,
                                                          values: list[Any]) -> None:
    results = outcome(lambda: router.batch(values, return_exceptions=True))
    assert not isinstance(results, TrustMarginError)  # errors come back in place
    assert len(results) == len(values)
    for result in results:
        if isinstance(result, BaseException):
            assert isinstance(result, TrustMarginError), repr(result)
        else:
            assert_valid(result)


# -- (d) what servers answer: echoed log-probabilities and Elasticsearch hits ------------------
# The server is the adversary here: its answer is drawn, the client's parsing and checks run
# for real (the OpenAI-compatible backend's with the real SmolLM2 tokenizer).

ECHO_PROMPT, ECHO_ANSWER = "Question: Who designed the tower?\nAnswer:", " Gustave Eiffel"


@pytest.fixture(scope="module")
def remote(backend: Any) -> Any:
    from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend

    # Nothing is sent: answer_logprob reads a response the test hands it.
    return OpenAICompatBackend("http://127.0.0.1:9", "m", backend.tokenizer)


def honest_echo(tokenizer: Any) -> dict[str, Any]:
    ids = tokenizer(ECHO_PROMPT + ECHO_ANSWER, add_special_tokens=False).input_ids
    tokens = [tokenizer.decode([i]) for i in ids] + ["."]
    return {"choices": [{"text": ECHO_PROMPT + ECHO_ANSWER + ".", "logprobs": {
        "tokens": tokens, "token_logprobs": [None] + [-0.5] * (len(ids) - 1) + [-1.0]}}],
        "usage": {"prompt_tokens": len(ids), "completion_tokens": 1}}


PATHS = [("choices",), ("choices", 0), ("choices", 0, "text"), ("choices", 0, "logprobs"),
         ("choices", 0, "logprobs", "tokens"), ("choices", 0, "logprobs", "token_logprobs"),
         ("usage",), ("usage", "prompt_tokens"), ("usage", "completion_tokens")]
numbers = st.one_of(st.floats(), st.integers(-10**400, 10), st.sampled_from(
    [-1e308, -1e6, -1e-300, 0.0, 1e-4, 0.01]))
mutations = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.one_of(json_values, numbers)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("insert"), st.sampled_from(PATHS[4:6]), st.one_of(numbers, texts)),
    st.tuples(st.just("pop"), st.sampled_from(PATHS[4:6]), st.integers(-20, 20)),
    st.tuples(st.just("number"), st.integers(-8, -2), numbers),
    st.tuples(st.just("token"), st.integers(-8, -2), st.one_of(texts, json_values)),
)


def mutate(body: dict[str, Any], how: tuple[str, Any, Any]) -> None:
    kind, where, value = how
    if kind in ("number", "token"):
        key = "token_logprobs" if kind == "number" else "tokens"
        body["choices"][0]["logprobs"][key][where] = value
        return
    *parents, last = where
    node: Any = body
    for key in parents:
        node = node[key]
    if kind == "set":
        node[last] = value
    elif kind == "delete":
        del node[last]
    elif kind == "insert":
        node[last].insert(len(node[last]) - 2, value)
    elif node[last] and -len(node[last]) <= value < len(node[last]):
        node[last].pop(value)


@budget(300)
@given(changes=st.lists(mutations, max_size=3))
def test_an_echo_of_any_shape_is_a_checked_number_or_a_backend_error(
    remote: Any, backend: Any, changes: list[tuple[str, Any, Any]]
) -> None:
    from trustmargin_integrations.backends.base import ContinuationRequest
    from trustmargin_integrations.backends.openai_compat.logprobs import (
        LOGPROB_FLOOR,
        LOGPROB_TOLERANCE,
    )
    from trustmargin_integrations.errors import BackendError

    body = honest_echo(backend.tokenizer)
    for change in changes:
        try:
            mutate(body, change)
        except (KeyError, IndexError, TypeError, AttributeError):
            break  # an earlier change removed what this one edits: the body is as it is
    n = remote.count_tokens(ECHO_ANSWER)
    result = outcome(lambda: remote.answer_logprob(body, ContinuationRequest(ECHO_PROMPT,
                                                                             ECHO_ANSWER)))
    if isinstance(result, TrustMarginError):
        assert isinstance(result, BackendError), repr(result)
        return
    assert isinstance(result, float) and n * LOGPROB_FLOOR <= result <= n * LOGPROB_TOLERANCE
    if not changes:
        assert result == pytest.approx(-0.5 * n)  # the honest echo is read exactly


hit_dicts = st.fixed_dictionaries(
    {}, optional={"_id": json_values, "_score": st.one_of(numbers, json_values),
                  "_source": st.one_of(json_values, st.fixed_dictionaries(
                      {"text": st.one_of(short, json_values)},
                      optional={"id": json_values, "title": st.one_of(short, json_values),
                                "metadata": json_values}))})
search_answers = st.one_of(
    json_values,
    st.fixed_dictionaries({"hits": st.one_of(json_values, st.fixed_dictionaries(
        {"hits": st.one_of(json_values, st.lists(st.one_of(hit_dicts, json_values),
                                                  max_size=5))}))}))


@budget(300)
@given(answer=search_answers, k=st.integers(1, 4))
def test_an_elasticsearch_answer_of_any_shape_is_passages_or_a_typed_error(answer: Any,
                                                                           k: int) -> None:
    from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchRetrievalError
    from trustmargin_integrations.retrieval.elasticsearch.queries import (
        hits_to_passages,
        msearch_answers,
    )

    result = outcome(lambda: hits_to_passages(answer, k, "the search"))
    if isinstance(result, TrustMarginError):
        assert isinstance(result, ElasticsearchRetrievalError), repr(result)
    else:
        assert len(result) <= k and all(isinstance(p, Passage) for p in result)
        scores = [p.score for p in result]
        if None not in scores:
            assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    batch = outcome(lambda: msearch_answers({"responses": [answer, answer]}, 2))
    assert isinstance(batch, list) == isinstance(answer, dict)


def test_the_strategies_reach_every_outcome(cheap: TrustMargin) -> None:
    """The fuzzers above are not vacuous: their inputs include ones that succeed and ones
    that fail, at each door (a sample drawn with a fixed seed)."""
    seen: dict[str, set[str]] = {"prepare": set(), "reader": set()}

    @settings(max_examples=150, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(item=items)
    def sample_items(item: Any) -> None:
        result = outcome(lambda: cheap.prepare(item))
        seen["prepare"].add(type(result).__name__)

    @settings(max_examples=150, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(content=st.lists(lines, min_size=1, max_size=3))
    def sample_lines(content: list[bytes]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "in.jsonl"
            path.write_bytes(b"\n".join(content) + b"\n")
            result = outcome(lambda: read_records(path, SETTINGS))
            seen["reader"].add("list" if isinstance(result, list) else type(result).__name__)

    sample_items()
    sample_lines()
    assert {"PreparedQuestion", "InvalidInputError"} <= seen["prepare"], seen
    assert {"list", "InvalidInputError"} <= seen["reader"], seen

"""One regression test per numbered case of the reliability issue, on the real embedded model,
real files, real processes and a real local HTTP server.

Where each case is covered (cases partly covered elsewhere are not repeated here):

1.  ``score`` never truncates or rewrites the output in place:
    ``test_case1_an_interrupted_rerun_leaves_the_previous_output_intact``,
    ``test_case1_an_input_named_like_the_outputs_store_is_never_written``, and under 20
    SIGKILL/SIGINT kills: ``tests/test_reliability_faults.py``.
2.  Resume keyed by content: duplicate, null and int ids and another tau:
    ``tests/test_cli.py::test_score_keys_on_content_not_ids``; ``-i X -o X``:
    ``tests/test_cli.py::test_score_refuses_unsafe_paths_and_bad_lines_before_loading``;
    another input file, another model, an int id equal to an id-less line's number:
    ``test_case2_resume_follows_the_content_across_files_models_and_ids``.
3.  Prompts vs the model's 8,192-token window: ``test_case3_an_overlong_question_fails_fast``,
    ``test_case3_an_overlong_candidate_fails_fast``,
    ``test_case3_a_context_budget_beyond_the_window_is_refused_or_capped``,
    ``test_case3_the_context_builder_is_linear``.
4.  Whole-file validation before the model loads, FILE:LINE.field, extra keys to metadata:
    ``test_case4_the_whole_file_is_validated_before_the_model_loads``;
    ``tests/test_cli.py::test_score_resumes_from_its_store_without_recomputing`` (metadata).
5.  Rich markup printed literally: ``test_case5_markup_in_questions_and_answers_is_printed_
    literally``, ``test_case5_markup_in_an_error_is_printed_literally``.
6.  Secrets: ``test_case6_no_log_record_carries_the_password`` (real local server, INFO and
    DEBUG), ``test_case6_server_error_texts_never_carry_the_password``,
    ``test_case6_schemeless_credentials_are_never_echoed``.
7.  NaN/inf rule parameters and a dict as passages:
    ``test_case7_non_finite_rule_parameters_are_refused``,
    ``test_case7_a_dict_as_passages_is_a_typed_error_in_score``; the API's dict-as-passages
    and the router's NaN tau: ``tests/test_arbiter.py::test_bad_input_names_the_field``,
    ``tests/test_langchain.py`` (``configurable`` tau NaN).
8.  Typed errors instead of tracebacks: invalid UTF-8 in JSONL and ``-o`` a directory:
    ``tests/test_cli.py::test_score_refuses_unsafe_paths_and_bad_lines_before_loading``;
    ``arbitrate(q, 5)``: ``tests/test_arbiter.py::test_bad_input_names_the_field``; lone
    surrogates: ``test_case8_a_lone_surrogate_is_a_typed_error_at_every_door``,
    ``test_case8_a_lone_surrogate_in_an_id_or_metadata_never_breaks_a_decision``,
    ``test_case8_a_lone_surrogate_in_a_jsonl_id_or_extra_key_never_breaks_score``,
    ``test_case8_ask_with_a_non_utf8_argument_exits_2``; a router document dict without
    ``page_content``: ``test_case8_a_document_dict_without_page_content_is_a_typed_error``;
    a non-numeric port:
    ``test_case8_a_non_numeric_port_exits_2_with_one_line``.
9.  Batch errors name the item: ``tests/test_arbiter.py::test_bad_input_names_the_field``;
    the router's ``context[1]``: ``tests/test_langchain.py``; the same names for one
    question at every door: ``test_case9_one_question_is_called_question_at_every_door``.
10. ``report`` stays inside the run directory:
    ``test_case10_a_crafted_dataset_name_cannot_write_outside_the_run``.
11. Zero-width questions, empty files, no mid-word wrapping:
    ``test_case11_a_question_of_zero_width_characters_is_a_typed_error``,
    ``test_case11_errors_are_one_unwrapped_line_at_80_columns``; an empty input file (exit
    2 and its message): ``tests/test_reliability_faults.py::test_unsafe_paths_exit_2_with_
    one_line_and_touch_nothing``.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

# Shared instrumentation beside the tests (tests/reliability_support.py).
from cli_support import run_main
from fault_server import echo_answer
from reliability_support import WindowGuard, time_limit
from typer.testing import CliRunner

from trustmargin_integrations import (
    BM25Index,
    Decision,
    InvalidInputError,
    Passage,
    TrustMargin,
    TrustMarginConfig,
)
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.cli import app
from trustmargin_integrations.demo import demo_corpus
from trustmargin_integrations.errors import TrustMarginError
from trustmargin_integrations.files import TEMP_MARK, TEMP_SUFFIX, temp_path
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchSettings
from trustmargin_integrations.score_file import key_settings, run_score
from trustmargin_integrations.store import ResultStore

runner = CliRunner()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
QUESTION = "Who designed the Zelvora Bridge?"
PASSAGE = "The Zelvora Bridge was designed by the engineer Marta Okonkwo in 1987."
GOOD = {"question": QUESTION, "passages": [PASSAGE], "direct_answer": "Gustave Eiffel",
        "rag_answer": "Marta Okonkwo"}


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300
         ) -> subprocess.CompletedProcess[str]:
    """The real command in its own process."""
    return subprocess.run([sys.executable, "-m", "trustmargin_integrations", *args],
                          env={**ENV, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, errors="replace")


def _write(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _settings(model: str = "smollm2-135m", **config: Any) -> dict[str, Any]:
    return key_settings(model, TrustMarginConfig(**config), dtype=None, device=None, remote=None)


class Loader:
    """``run_score``'s model loader, counting how often the job asked for the model."""

    def __init__(self, tm: TrustMargin | None) -> None:
        self.tm = tm
        self.calls = 0

    def __call__(self) -> TrustMargin:
        self.calls += 1
        if self.tm is None:
            pytest.fail("the job loaded the model although it had to stop before that")
        return self.tm


def _decisions(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in row.items() if k != "timings"} for row in rows]


# -- 1 ---------------------------------------------------------------------------------------


class _Interrupting:
    """The real arbiter; a Ctrl-C arrives while its second batch is computed."""

    def __init__(self, tm: TrustMargin) -> None:
        self.tm = tm
        self.batches = 0

    def prepare_batch(self, items: Any, **kwargs: Any) -> Any:
        return self.tm.prepare_batch(items, **kwargs)

    def arbitrate_batch(self, items: Any, **kwargs: Any) -> list[Decision]:
        self.batches += 1
        if self.batches == 2:
            raise KeyboardInterrupt
        return self.tm.arbitrate_batch(items, **kwargs)


def test_case1_an_interrupted_rerun_leaves_the_previous_output_intact(
    tm: TrustMargin, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    first = _write(tmp_path / "a.jsonl", [GOOD])
    run_score(first, out, _settings(), Loader(tm), batch_size=1, progress=False)
    before = out.read_bytes()
    rows = [{**GOOD, "question": f"{QUESTION} ({n})"} for n in range(3)]
    second = _write(tmp_path / "b.jsonl", rows)
    with pytest.raises(KeyboardInterrupt):
        run_score(second, out, _settings(), lambda: _Interrupting(tm),  # type: ignore[arg-type, return-value]
                  batch_size=1, progress=False)
    assert out.read_bytes() == before  # the old output, whole: not truncated, not mixed
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "b.jsonl", "out.jsonl", "out.jsonl.cache"]  # no temporary file left
    assert len(ResultStore(tmp_path / "out.jsonl.cache")) == 2  # the finished batch is kept
    loader = Loader(tm)
    report = run_score(second, out, _settings(), loader, batch_size=1, progress=False)
    assert (report.computed, report.reused) == (2, 1)
    assert [d["question"] for d in _decisions(out)] == [r["question"] for r in rows]


def test_case1_an_input_named_like_the_outputs_store_is_never_written(tmp_path: Path) -> None:
    """``OUTPUT.cache`` is the store that the job appends to: when it is the input file,
    the job must refuse, not append its results to the user's input."""
    src = _write(tmp_path / "run.jsonl.cache", [GOOD])
    before = src.read_bytes()
    with pytest.raises(InvalidInputError) as err:
        run_score(src, tmp_path / "run.jsonl", _settings(), Loader(None), batch_size=1,
                  progress=False)
    assert err.value.field in ("--output", "--input") and "Fix:" in str(err.value)
    assert src.read_bytes() == before
    assert not (tmp_path / "run.jsonl").exists()


# -- 2 ---------------------------------------------------------------------------------------


def test_case2_resume_follows_the_content_across_files_models_and_ids(
    tm: TrustMargin, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    a = {**GOOD}
    b = {**GOOD, "question": "Who opened the Zelvora Bridge?"}
    c = {**GOOD, "question": "Which engineer built the Zelvora Bridge?"}
    # Line 1 has no id (so its id is "1"); line 2 has the int id 1: the same id, other text.
    first = _write(tmp_path / "first.jsonl", [a, {**b, "id": 1}])
    loader = Loader(tm)
    report = run_score(first, out, _settings(), loader, batch_size=2, progress=False)
    assert (report.computed, report.reused) == (2, 0)
    assert [(d["id"], d["question"]) for d in _decisions(out)] == [("1", a["question"]),
                                                                   ("1", b["question"])]
    # Another input file into the same output: shared records are reused whatever their
    # ids and places; the output is exactly the new file's, in its order.
    second = _write(tmp_path / "second.jsonl",
                    [{**c, "id": "c"}, {**b, "id": "b", "gold": "x"}, {**a, "id": None}])
    report = run_score(second, out, _settings(), loader, batch_size=2, progress=False)
    assert (report.computed, report.reused) == (1, 2)
    decisions = _decisions(out)
    assert [(d["id"], d["question"]) for d in decisions] == [
        ("c", c["question"]), ("b", b["question"]), (None, a["question"])]
    assert [d["metadata"] for d in decisions] == [{}, {"gold": "x"}, {}]
    # Another model is another key: nothing is reused.
    report = run_score(second, out, _settings("another-model"), loader, batch_size=2,
                       progress=False)
    assert (report.computed, report.reused) == (3, 0)


# -- 3 ---------------------------------------------------------------------------------------


def test_case3_an_overlong_question_fails_fast(tm: TrustMargin) -> None:
    began = time.monotonic()
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate("Why? " * 20_000, [PASSAGE], "a", "b")
    assert err.value.field == "question" and "8192-token window" in str(err.value)
    with pytest.raises(InvalidInputError) as batch:
        tm.arbitrate_batch([GOOD, {**GOOD, "question": "x" * 100_000}])
    assert batch.value.field == "inputs[1].question"
    assert time.monotonic() - began < 15  # seconds, not minutes of compute


def test_case3_an_overlong_candidate_fails_fast(backend: Any) -> None:
    """A given candidate is scored after each of the three prompts: one longer than the
    window cannot be scored. It must be refused (naming it) or cut with a warning, fast."""
    guarded = TrustMargin(WindowGuard(backend))
    long_answer = "Marta Okonkwo and " + "the engineers of the bridge " * 2_000
    began = time.monotonic()
    with time_limit(60):
        try:
            decision = guarded.arbitrate(QUESTION, [PASSAGE], "Gustave Eiffel", long_answer)
        except InvalidInputError as exc:
            assert exc.field == "rag_answer", exc
        else:
            assert any(w.startswith("rag_answer") for w in decision.warnings), decision
    assert time.monotonic() - began < 30


def test_case3_a_context_budget_beyond_the_window_is_refused_or_capped(backend: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_context_tokens"):
        TrustMarginConfig(max_context_tokens=10**9)
    wide = TrustMargin(backend, TrustMarginConfig(max_context_tokens=10_000_000))
    passages = [f"Passage {i}: the Zelvora Bridge has {i} rivets on span {i}." for i in range(900)]
    prepared = wide.prepare({"question": QUESTION, "passages": passages})
    assert any("8192-token window" in w for w in prepared.input.warnings)
    rendered = max(backend.count_tokens(v) for v in (prepared.views.question_context,
                                                      prepared.views.context_only))
    assert rendered + wide.config.max_new_tokens <= backend.context_window
    assert 0 < prepared.context.passages_used < len(passages)


class _CountingTokenizer:
    """The real backend, counting the characters it is asked to tokenize."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chars = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def count_tokens(self, text: str) -> int:
        self.chars += len(text)
        return self.inner.count_tokens(text)


def test_case3_the_context_builder_is_linear(backend: Any) -> None:
    """600 passages are cut to the window tokenizing each passage a bounded number of times
    (a quadratic builder re-tokenizes every prefix)."""
    passages = [f"Passage text {i}: the bridge over the river was repaired in {1900 + i}."
                for i in range(600)]
    budget = 10_000_000  # capped to the window: the builder must stop at the window
    counting = _CountingTokenizer(backend)
    arbiter = TrustMargin(counting, TrustMarginConfig(max_context_tokens=budget))
    arbiter.prepare({"question": QUESTION, "passages": passages[:5]})  # warm the tokenizer
    counting.chars = 0
    prepared = arbiter.prepare({"question": QUESTION, "passages": passages})
    used = prepared.context.passages_used
    assert 100 < used < 600
    # The work, not the clock (timings live in benchmarks/contexts.py): a bounded number of
    # characters tokenized per passage kept.
    assert counting.chars <= 8 * sum(len(p) for p in passages[:used + 1]) + 20_000


# -- 4 ---------------------------------------------------------------------------------------


def test_case4_the_whole_file_is_validated_before_the_model_loads(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [{**GOOD, "id": f"q{i}", "gold": "Marta Okonkwo"}
                                  for i in range(2_999)]
    rows.append({**GOOD, "passages": PASSAGE})  # line 3,000: one passage as a bare string
    src = _write(tmp_path / "big.jsonl", rows)
    out = tmp_path / "out.jsonl"
    with pytest.raises(InvalidInputError) as err:
        run_score(src, out, _settings(), Loader(None), batch_size=8, progress=False)
    assert err.value.field == f"{src}:3000.passages"
    assert "list" in err.value.problem and err.value.fix
    assert not out.exists() and not (tmp_path / "out.jsonl.cache").exists()
    # An extra key that is also a metadata key is ambiguous: named, with its line.
    _write(src, [GOOD, {**GOOD, "gold": "a", "metadata": {"gold": "b"}}])
    with pytest.raises(InvalidInputError) as clash:
        run_score(src, out, _settings(), Loader(None), batch_size=8, progress=False)
    assert clash.value.field == f"{src}:2.gold"


# -- 5 ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(p.model_dump()) + "\n" for p in demo_corpus()),
                    encoding="utf-8")
    return path


def test_case5_markup_in_questions_and_answers_is_printed_literally(corpus: Path) -> None:
    question = "Who designed [/] the [bold]Zelvora[/bold] Bridge?"
    result = runner.invoke(app, ["ask", question, "--corpus", str(corpus),
                                 "--direct-answer", "[red]Gustave Eiffel",
                                 "--rag-answer", "Marta Okonkwo [/]"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert question in result.output
    assert "'[red]Gustave Eiffel'" in result.output and "'Marta Okonkwo [/]'" in result.output


def test_case5_markup_in_an_error_is_printed_literally(tmp_path: Path) -> None:
    missing = tmp_path / "[bold]x[/bold]" / "[/]in.jsonl"
    done = _cli("score", "-i", str(missing), "-o", str(tmp_path / "o.jsonl"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"error --input: {missing} is not a file. Fix: pass a "
                                   "JSONL file")


# -- 6 ---------------------------------------------------------------------------------------

USER, SECRET = "reader", "hunter2-Zq9x"


class _Completions(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/completions endpoint on 127.0.0.1: echo requests get
    an honest echo (the prompt, its SmolLM2 tokens, one log-probability per token at -0.5:
    the client verifies all of it), generation requests get "Paris". A prompt ending in
    "FAIL" gets HTTP 400 with a body that quotes the password, as some servers quote
    credentials back."""

    seen: ClassVar[list[str | None]] = []
    tokenizer: ClassVar[Any] = None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(self.headers.get("Authorization"))
        status, answer = 200, {"choices": [{"text": "Paris"}]}
        if str(body.get("prompt", "")).endswith("FAIL"):
            status, answer = 400, {"error": f"bad password {SECRET} for user {USER}"}
        elif body.get("echo"):
            answer = echo_answer(type(self).tokenizer, body["prompt"]).body  # type: ignore[assignment]
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (an ephemeral port), stopped after the test."""
    _Completions.seen = []
    _Completions.tokenizer = _Completions.tokenizer or load_tokenizer("smollm2-135m")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + (self.formatException(record.exc_info)
                                      if record.exc_info else "")
        self.messages.append((record.name, text))


@contextmanager
def _logging_at(level: int) -> Iterator[_Records]:
    root = logging.getLogger()
    handler, old = _Records(), root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _secret_forms() -> tuple[str, str]:
    return SECRET, base64.b64encode(f"{USER}:{SECRET}".encode()).decode()


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_case6_no_log_record_carries_the_password(server: str, corpus: Path, level: int,
                                                  backend: Any) -> None:
    url = f"http://{USER}:{SECRET}@{server}"
    with _logging_at(level) as records:
        result = runner.invoke(app, ["ask", QUESTION, "--corpus", str(corpus), "--remote-url",
                                     url, "--direct-answer", "Gustave Eiffel",
                                     "--rag-answer", "Marta Okonkwo", "--json"])
        assert result.exit_code == 0, (result.output, result.exception)
        remote = OpenAICompatBackend(url, "smollm2", backend.tokenizer, max_concurrency=2)
        assert remote.generate(["Question: capital of France?"], 2) == ["Paris"]
        texts = [repr(remote), remote.url, result.output]
        remote.close()
    # The real request path ran: the password really travelled (as basic auth) ...
    basic = f"Basic {_secret_forms()[1]}"
    assert _Completions.seen and set(_Completions.seen) == {basic}
    # ... and httpx/httpcore logged those requests, yet no record shows it.
    names = {name for name, _ in records.messages}
    assert "httpx" in names, names
    if level == logging.DEBUG:
        assert any(n.startswith("httpcore") for n in names), names
    for form in _secret_forms():
        leaked = [(n, m) for n, m in records.messages if form in m]
        assert not leaked, leaked
        assert all(form not in text for text in texts)


def test_case6_server_error_texts_never_carry_the_password(server: str, backend: Any) -> None:
    remote = OpenAICompatBackend(f"http://{USER}:{SECRET}@{server}", "smollm2",
                                 backend.tokenizer, max_retries=0)
    with _logging_at(logging.DEBUG) as records, pytest.raises(TrustMarginError) as err:
        remote.generate(["FAIL"], 2)
    remote.close()
    assert "HTTP 400" in str(err.value)
    for form in _secret_forms():
        assert form not in str(err.value), str(err.value)
        assert not [m for _, m in records.messages if form in m]


def test_case6_schemeless_credentials_are_never_echoed(corpus: Path) -> None:
    for args in (["--remote-url", f"{USER}:{SECRET}@127.0.0.1:8000"],
                 ["--remote-url", f"http://{USER}:{SECRET}@127.0.0.1:abc"],
                 ["--elasticsearch", f"{USER}:{SECRET}@127.0.0.1:9200"],
                 ["--elasticsearch", f"{USER}:{SECRET}@127.0.0.1:abc"]):
        extra = ["--corpus", str(corpus)] if args[0] == "--remote-url" else []
        result = runner.invoke(app, ["ask", QUESTION, *extra, *args])
        assert isinstance(result.exception, InvalidInputError), (args, result.exception)
        assert SECRET not in str(result.exception) and SECRET not in result.output
        assert "127.0.0.1" in str(result.exception)  # the place is still named
    settings = ElasticsearchSettings(f"http://{USER}:{SECRET}@127.0.0.1:9200")
    assert SECRET not in repr(settings) and SECRET not in settings.safe_url


# -- 7 ---------------------------------------------------------------------------------------


def test_case7_non_finite_rule_parameters_are_refused(tm: TrustMargin, tmp_path: Path) -> None:
    for name in ("tau", "lambda_bind"):
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(InvalidInputError, match=name):
                TrustMarginConfig(**{name: value})
            with pytest.raises(InvalidInputError, match=name):
                TrustMarginRouter(tm=tm, **{name: value})
    src = _write(tmp_path / "in.jsonl", [GOOD])
    for option in ("--tau", "--lambda-bind"):
        result = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path / "o.jsonl"),
                                     option, "nan"])
        assert isinstance(result.exception, InvalidInputError), result.exception
        assert result.exception.field == option
    assert not (tmp_path / "o.jsonl").exists()


def test_case7_a_dict_as_passages_is_a_typed_error_in_score(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", [GOOD, {**GOOD, "passages": {"text": PASSAGE}}])
    with pytest.raises(InvalidInputError) as err:
        run_score(src, tmp_path / "o.jsonl", _settings(), Loader(None), batch_size=1,
                  progress=False)
    assert err.value.field == f"{src}:2.passages" and "list" in err.value.fix


# -- 8 ---------------------------------------------------------------------------------------


def test_case8_a_lone_surrogate_is_a_typed_error_at_every_door(tm: TrustMargin,
                                                               tmp_path: Path) -> None:
    for kwargs, field in (({"question": "Who\ud800?"}, "question"),
                          ({"passages": ["ok", "\udcff"]}, "passages[1]"),
                          ({"rag_answer": "\ud800"}, "rag_answer")):
        with pytest.raises(InvalidInputError) as err:
            tm.arbitrate(**{**GOOD, **kwargs})
        assert err.value.field == field
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "question": "\ud800"}) + "\n",
                   encoding="utf-8")  # json.dumps writes the surrogate as the escape \ud800
    with pytest.raises(InvalidInputError) as line:
        run_score(src, tmp_path / "o.jsonl", _settings(), Loader(None), batch_size=1,
                  progress=False)
    assert line.value.field == f"{src}:2.question"


@pytest.mark.parametrize("extra", [{"id": "q-\ud800"}, {"metadata": {"gold": "\udcff"}}])
def test_case8_a_lone_surrogate_in_an_id_or_metadata_never_breaks_a_decision(
    tm: TrustMargin, extra: dict[str, Any]
) -> None:
    """Refused with a typed error naming the field, or carried in a Decision that can be
    written as JSON; never a Decision that fails to serialize."""
    try:
        decisions = tm.arbitrate_batch([GOOD, {**GOOD, **extra}])
    except InvalidInputError as exc:
        assert exc.field.startswith(f"inputs[1].{next(iter(extra))}"), exc
        return
    for decision in decisions:
        Decision.model_validate_json(decision.model_dump_json())


@pytest.mark.parametrize("extra", [{"id": "q-\ud800"}, {"gold": "\udcff"}])
def test_case8_a_lone_surrogate_in_a_jsonl_id_or_extra_key_never_breaks_score(
    tm: TrustMargin, tmp_path: Path, extra: dict[str, Any]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **extra}) + "\n",
                   encoding="utf-8")
    out = tmp_path / "o.jsonl"
    try:
        run_score(src, out, _settings(), Loader(tm), batch_size=2, progress=False)
    except InvalidInputError as exc:
        assert exc.field.startswith(f"{src}:2"), exc  # refused, naming the line
        return
    assert len(_decisions(out)) == 2  # or written: the output is valid UTF-8 JSON lines


def test_case8_a_document_dict_without_page_content_is_a_typed_error(tm: TrustMargin) -> None:
    """The router reads documents as Document objects "or their dict form": a dict without
    ``page_content`` is named like any other bad document, in ``invoke`` and in ``batch``."""
    router = TrustMarginRouter(tm=tm)
    good = {"question": QUESTION, "direct_answer": "Gustave Eiffel",
            "rag_answer": "Marta Okonkwo", "documents": [{"page_content": PASSAGE}]}
    bad = {**good, "documents": [{"page_content": PASSAGE}, {}]}
    with pytest.raises(InvalidInputError) as err:
        router.invoke(bad)
    assert err.value.field.startswith("documents[1]"), err.value.field
    results = router.batch([good, bad], return_exceptions=True)
    assert isinstance(results[0], Decision)
    assert isinstance(results[1], InvalidInputError), repr(results[1])
    assert results[1].field.startswith("inputs[1].documents[1]")


def test_case8_ask_with_a_non_utf8_argument_exits_2(corpus: Path) -> None:
    # Python decodes the byte 0xff of argv with surrogateescape: the question is "\udcff".
    done = subprocess.run([sys.executable, "-m", "trustmargin_integrations", "ask", b"\xff",
                           "--corpus", str(corpus), "--direct-answer", "a", "--rag-answer",
                           "b"], env=ENV, capture_output=True, text=True, errors="replace",
                          timeout=300)
    lines = [x for x in done.stderr.splitlines()
             if x.strip() and not x.startswith("Loading weights")]  # the model's progress bar
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error ") and "question" in lines[0]
    assert "Fix:" in lines[0] and "Traceback" not in done.stderr


def test_case8_a_non_numeric_port_exits_2_with_one_line(corpus: Path) -> None:
    for args in (["--elasticsearch", "http://h:abc"],
                 ["--corpus", str(corpus), "--remote-url", "http://h:abc"]):
        done = _cli("ask", "q?", *args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "port that is not a number" in lines[0], done.stderr
        assert lines[0].startswith(("error url:", "error base_url:"))


# -- 9 ---------------------------------------------------------------------------------------


def test_case9_one_question_is_called_question_at_every_door(tm: TrustMargin) -> None:
    """An unusable question is ``question`` for one question and ``questions[i]`` in
    ``answer_batch``, whatever makes it unusable (blank, invisible, not Unicode): never
    ``inputs[0].question``, a name the caller never used."""
    index = BM25Index.build([Passage(id="p0", title="Zelvora Bridge", text=PASSAGE)])
    for bad in ("   ", "\u200b\u200d\ufeff", "Who\ud800?"):
        with pytest.raises(InvalidInputError) as one:
            tm.answer(bad, index, k=1, direct_answer="a", rag_answer="b")
        assert one.value.field == "question", (bad, one.value.field)
        with pytest.raises(InvalidInputError) as batch:
            tm.answer_batch(["Who built it?", bad], index, k=1, direct_answers=["a", "a"],
                            rag_answers=["b", "b"])
        assert batch.value.field == "questions[1]", (bad, batch.value.field)


# -- 10 --------------------------------------------------------------------------------------


def test_case10_a_crafted_dataset_name_cannot_write_outside_the_run(
    tm: TrustMargin, tmp_path: Path
) -> None:
    decisions = tm.arbitrate_batch([
        {"question": "What is the capital of France?", "passages": [
            "Paris is the capital of France."], "direct_answer": "Lyon", "rag_answer": "Paris"},
        {**GOOD, "id": "z"}])
    outside = tmp_path / "a" / "b"
    run_dir = outside / "run"
    store = ResultStore(run_dir / "cache.jsonl")
    examples = []
    for i, (decision, gold) in enumerate(zip(decisions, ["Paris", "Marta Okonkwo"],
                                             strict=True)):
        store.put(f"k{i}", {"decision": decision.model_dump(mode="json"), "retrieval_s": 0.0})
        examples.append({"id": str(i), "answers": [gold], "key": f"k{i}", "type": None})
    crafted = ["x/../../../evil", "/../../../../abs_evil", "../../evil", "..\\..\\win_evil"]
    manifest = {"datasets": {name: {"model": "smollm2-135m", "retrieval": "given",
                                    "examples": examples} for name in crafted}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    before = {p for p in tmp_path.rglob("*")}
    result = runner.invoke(app, ["report", str(run_dir)])
    if result.exception is not None:  # refusing the manifest is fine, if it is a typed error
        assert isinstance(result.exception, TrustMarginError), repr(result.exception)
    written = {p for p in tmp_path.rglob("*")} - before
    escaped = sorted(str(p) for p in written if run_dir not in p.parents)
    assert not escaped, f"report wrote outside {run_dir}: {escaped}"


# -- 11 --------------------------------------------------------------------------------------


def test_case11_a_question_of_zero_width_characters_is_a_typed_error(tm: TrustMargin) -> None:
    for question in ("\u200b", "\u200b\u200c\u200d\u2060\ufeff", " \u200e\u200f\t"):
        with pytest.raises(InvalidInputError) as err:
            tm.arbitrate(question, [PASSAGE], "a", "b")
        assert err.value.field == "question" and "visible" in err.value.problem


def test_case11_errors_are_one_unwrapped_line_at_80_columns(tmp_path: Path) -> None:
    deep = tmp_path.joinpath("a-rather-long-folder-name-for-wrapping",
                             "another-fairly-long-sub-folder-name", "and-one-more-level")
    deep.mkdir(parents=True)
    src = _write(deep / "candidates-with-a-long-file-name.jsonl",
                 [GOOD, {**GOOD, "passages": PASSAGE}])
    done = _cli("score", "-i", str(src), "-o", str(deep / "o.jsonl"), env={"COLUMNS": "80"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, done.stderr
    assert f"{src}:2.passages" in lines[0]  # the path and the field, whole
    assert lines[0].endswith("Fix: pass a list of passage texts or Passage records (wrap a "
                             "single passage in a list)")
    assert done.stdout == ""


# -- issue 19, items 6, 8 and 10: two processes, links, hard links, file modes ---------------

SCORE_LOOP_CHILD = """
import sys
from pathlib import Path
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.score_file import key_settings, run_score

def no_model():
    raise SystemExit("every record is cached: the model must not load")

settings = key_settings("smollm2-135m", TrustMarginConfig(), dtype=None, device=None,
                        remote=None)
for _ in range(int(sys.argv[3])):
    run_score(Path(sys.argv[1]), Path(sys.argv[2]), settings, no_model, batch_size=1,
              progress=False)
"""


def _cached_output(tm: TrustMargin, root: Path, lines: int) -> tuple[Path, Path]:
    """An input of ``lines`` copies of GOOD (own ids) whose one result is already stored."""
    out = root / "out.jsonl"
    run_score(_write(root / "one.jsonl", [GOOD]), out, _settings(), Loader(tm), batch_size=1,
              progress=False)
    return _write(root / "in.jsonl", [{**GOOD, "id": f"q{i}"} for i in range(lines)]), out


def test_two_score_processes_on_one_output_both_finish(tm: TrustMargin, tmp_path: Path) -> None:
    """Two real ``score`` processes write one output, 12 times each, at the same time. Before,
    one crashed (FileNotFoundError) in most rounds: its stale-temp cleanup deleted the other's
    in-flight temporary file."""
    src, out = _cached_output(tm, tmp_path, 3000)
    procs = [subprocess.Popen([sys.executable, "-c", SCORE_LOOP_CHILD, str(src), str(out),
                               "12"], env=ENV, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [e[-2000:] for e in errors]
    assert [d["id"] for d in _decisions(out)] == [f"q{i}" for i in range(3000)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl", "one.jsonl", "out.jsonl", "out.jsonl.cache"]


def test_score_leaves_a_live_writers_temporary_file_alone(tm: TrustMargin,
                                                          tmp_path: Path) -> None:
    src, out = _cached_output(tm, tmp_path, 2)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # NAME.writing-HOST-PID-TOKEN.tmp, as the live process would name its temp.
        host = temp_path(out).name.split(TEMP_MARK)[1].rsplit("-", 2)[0]
        theirs = tmp_path / f"out.jsonl{TEMP_MARK}{host}-{live.pid}-0a0a{TEMP_SUFFIX}"
        theirs.write_text("another run's output, half written", encoding="utf-8")
        run_score(src, out, _settings(), Loader(None), batch_size=1, progress=False)
        assert theirs.exists(), "score deleted a live process's temporary file"
    finally:
        live.kill()
        live.wait()


def test_score_refuses_a_store_that_is_the_input_or_a_link(tmp_path: Path) -> None:
    """``OUTPUT.cache`` hard-linked to the input (before: the run appended its results to
    the input file) or a symbolic link to a file elsewhere is refused before the model loads,
    and neither file changes."""
    src = _write(tmp_path / "in.jsonl", [GOOD])
    before = src.read_bytes()
    out = tmp_path / "out.jsonl"
    os.link(src, tmp_path / "out.jsonl.cache")
    with pytest.raises(InvalidInputError) as err:
        run_score(src, out, _settings(), Loader(None), batch_size=1, progress=False)
    assert err.value.field == "--input" and "store" in err.value.problem
    (tmp_path / "out.jsonl.cache").unlink()
    victim = _write(tmp_path / "elsewhere.jsonl", [])
    (tmp_path / "out.jsonl.cache").symlink_to(victim)
    with pytest.raises(InvalidInputError, match="symbolic link") as err:
        run_score(src, out, _settings(), Loader(None), batch_size=1, progress=False)
    assert err.value.field == "--output"
    assert src.read_bytes() == before and victim.read_bytes() == b"" and not out.exists()


def test_score_output_and_store_get_the_same_file_mode(tm: TrustMargin, tmp_path: Path) -> None:
    """Before, the output was 0600 (a private temporary file renamed) and its store 0644."""
    _, out = _cached_output(tm, tmp_path, 1)
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (out, tmp_path / "out.jsonl.cache")}
    assert set(modes.values()) == {0o666 & ~umask}, modes


# -- issue 19, items 5 and 10: user-sized loops, duplicate keys, repeated warnings -----------


def test_a_duplicate_json_key_is_refused_at_every_reader(tmp_path: Path) -> None:
    """The standard parser silently keeps the last of two equal keys; every file a user
    gives us (score input, corpus, dataset, calibration) refuses it, naming the record."""
    from trustmargin_integrations.calibration import Calibration
    from trustmargin_integrations.evaluation.datasets import load_examples
    from trustmargin_integrations.retrieval.corpus import load_corpus

    twice = ('{"question": "Q1?", "question": "Q2?", "passages": ["p"], '
             '"direct_answer": "a", "rag_answer": "b"}\n')
    score_input = tmp_path / "in.jsonl"
    score_input.write_text(twice, encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        run_score(score_input, tmp_path / "out.jsonl", _settings(), Loader(None),
                  batch_size=1, progress=False)
    assert err.value.field == f"{score_input}:1" and "'question' twice" in str(err.value)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"title": "A", "text": "x", "text": "y"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'text' twice"):
        load_corpus(corpus)
    dataset = tmp_path / "labeled.json"
    dataset.write_text('[{"question": "Q?", "answer": "a", "answer": "b", '
                       '"passages": ["p"]}]', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'answer' twice"):
        load_examples(dataset)
    calibration = tmp_path / "calibration.json"
    calibration.write_text('{"lambda_bind": 0.5, "lambda_bind": 0.9}', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="'lambda_bind' twice"):
        Calibration.load(calibration)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"title": "A", "text": "x", "score": NaN}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="NaN is not a JSON number"):
        load_corpus(nan)


def test_rearbitrating_a_prepared_question_records_its_warnings_once(tm: TrustMargin) -> None:
    legacy = TrustMargin(tm.backend, TrustMarginConfig(scoring_form="sentence"))
    prepared = legacy.prepare({"question": QUESTION, "passages": [PASSAGE],
                               "direct_answer": "Sure! Gustave Eiffel.\n\nMore.",
                               "rag_answer": "Marta Okonkwo"})
    first = legacy.arbitrate_batch([prepared])[0]
    again = legacy.arbitrate_batch([prepared])[0]
    assert any("direct_answer: scored on its short form" in w for w in first.warnings)
    assert again.warnings == first.warnings
    assert (again.m, again.answer) == (first.m, first.answer)


def test_bootstrap_resamples_are_capped_before_any_work(tmp_path: Path) -> None:
    """``calibrate --resamples 100000000`` grew past 6 GB; now it is one typed line."""
    from trustmargin_integrations.evaluation.bootstrap import MAX_RESAMPLES, paired_bootstrap

    with pytest.raises(InvalidInputError) as err:
        paired_bootstrap({"direct": [0.0, 1.0], "rag": [1.0, 1.0]},
                         resamples=MAX_RESAMPLES + 1)
    assert err.value.field == "resamples"
    for command in ("calibrate", "check"):
        run = run_main(command, str(tmp_path / "no_run"), "--resamples", "100000000")
        assert run.exit_code == 2 and "--resamples" in run.output, run.output

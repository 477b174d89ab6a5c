"""One backend spec and one factory: ``--backend hf:MODEL`` / ``openai:URL#MODEL`` on every
command and in ``TrustMargin.from_pretrained``, capabilities the engines declare, the engine
grouping the arbiter's model calls, and a policy file that remembers its backend.

Everything here runs the real embedded model or builds the real OpenAI-compatible backend
(no request is sent: building one loads its tokenizer only). Commands against a running
server are in ``test_remote_commands.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_main

import trustmargin_integrations
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend, Capabilities, ModelSession
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.backends.loading import load_backend, load_backends
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend
from trustmargin_integrations.backends.spec import BackendSpec
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.runner import settings_for
from trustmargin_integrations.policy_file import PolicyFile

SERVER = "http://127.0.0.1:9"  # nothing listens there; no test here sends a request
SHIPPED = Path(trustmargin_integrations.__file__).parent / "policies" / "smollm2-135m.json"


@pytest.mark.parametrize(("text", "expected"), [
    ("smollm2-135m", BackendSpec("hf", "smollm2-135m")),
    ("hf:qwen2.5-1.5b", BackendSpec("hf", "qwen2.5-1.5b")),
    ("hf:/models/my-model", BackendSpec("hf", "/models/my-model")),
    ("HuggingFaceTB/SmolLM2-135M", BackendSpec("hf", "HuggingFaceTB/SmolLM2-135M")),
    (f"openai:{SERVER}/v1#smollm2-135m", BackendSpec("openai", "smollm2-135m", f"{SERVER}/v1")),
    (f"openai:{SERVER}#model=served&tokenizer=smollm2-135m",
     BackendSpec("openai", "served", SERVER, tokenizer="smollm2-135m")),
])
def test_a_spec_names_the_engine_and_its_model(text: str, expected: BackendSpec) -> None:
    assert BackendSpec.parse(text) == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("vllm:http://h:8000#m", "unknown backend kind 'vllm'"),
    ("hf:", "names no model"),
    ("openai:http://h:8000/v1", "names no served model"),
    ("openai:h:8000#m", "not an http(s) URL"),
    ("openai:http://h:abc#m", "port that is not a number"),
    ("openai:http://h:8000#m&temperature=1", "is not model=NAME or tokenizer=SOURCE"),
])
def test_a_bad_spec_names_the_option_and_the_fix(text: str, problem: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        BackendSpec.parse(text, "--backend")
    assert err.value.field == "--backend" and problem in err.value.problem
    assert err.value.fix


def test_the_old_options_are_shorthands_of_a_spec() -> None:
    assert BackendSpec.from_shorthand(None) == BackendSpec("hf", "smollm2-135m")
    assert BackendSpec.from_shorthand("qwen2.5-1.5b") == BackendSpec("hf", "qwen2.5-1.5b")
    assert BackendSpec.from_shorthand("smollm2-135m", SERVER, "served") == BackendSpec(
        "openai", "served", SERVER, tokenizer="smollm2-135m")
    with pytest.raises(InvalidInputError, match=r"^--remote-model: needs --remote-url"):
        BackendSpec.from_shorthand("smollm2-135m", None, "served")


def test_from_pretrained_takes_a_server_spec() -> None:
    tm = TrustMargin.from_pretrained(f"openai:{SERVER}#smollm2-135m", calibration=None,
                                     max_concurrency=2)
    assert isinstance(tm.backend, OpenAICompatBackend)
    assert (tm.backend.model, tm.backend.max_concurrency) == ("smollm2-135m", 2)
    assert tm.backend.capabilities == Capabilities(kind="openai", model="smollm2-135m")


def test_the_factory_refuses_options_the_engine_has_no_use_for() -> None:
    with pytest.raises(InvalidInputError, match=r"^device: applies to a local model"):
        load_backend(f"openai:{SERVER}#smollm2-135m", device="cpu")
    with pytest.raises(InvalidInputError, match=r"^concurrency: applies to a server"):
        load_backend("hf:smollm2-135m", max_concurrency=4)
    with pytest.raises(InvalidInputError, match="servers of the same model"):
        load_backends([f"openai:{SERVER}#a", f"openai:{SERVER}#b"])
    with pytest.raises(InvalidInputError, match="servers of the same model"):
        load_backends(["hf:smollm2-135m", f"openai:{SERVER}#smollm2-135m"])


def test_commands_take_backend_and_name_its_errors() -> None:
    refused = run_main("ask", "Who?", "--corpus", "x.json", "--backend", "vllm:http://h#m")
    assert refused.exit_code == 2 and "--backend: unknown backend kind 'vllm'" in refused.output
    both = run_main("score", "-i", "in.jsonl", "-o", "out.jsonl", "--backend",
                    "smollm2-135m", "--model", "smollm2-135m")
    assert both.exit_code == 2 and "--model: cannot be combined with --backend" in both.output
    nameless = run_main("eval", "--backend", "openai:http://127.0.0.1:9/v1", "--limit", "1")
    assert nameless.exit_code == 2 and "--backend: 'http://127.0.0.1:9/v1' names no served " \
        "model" in " ".join(nameless.output.split())
    device = run_main("check", "q.jsonl", "--backend", f"openai:{SERVER}#m", "--device", "cpu")
    assert device.exit_code == 2 and "--device: applies to a local model" in device.output


def test_engines_declare_their_capabilities(backend: HFBackend) -> None:
    caps = backend.capabilities
    assert (caps.kind, caps.model, caps.dtype) == ("hf", backend.model_id, "float32")
    assert caps.threads is not None and caps.label == f"hf:{backend.model_id}"
    assert backend.count_tokens_batch(["one two", ""]) == [backend.count_tokens("one two"), 0]


def test_a_server_run_is_keyed_apart_from_the_local_model(backend: HFBackend) -> None:
    local = settings_for(TrustMargin(backend), top_k=3, dtype=None, retrieval="r").as_dict()
    # A local model's key holds what it always held: no engine entry.
    assert "engine" not in local and local["dtype"] == "float32" and "threads" in local
    remote_backend = OpenAICompatBackend(SERVER, backend.model_id, backend.tokenizer,
                                         model_id=backend.model_id)
    remote = settings_for(TrustMargin(remote_backend), top_k=3, dtype=None,
                          retrieval="r").as_dict()
    assert remote["engine"] == f"openai:{backend.model_id}" and "threads" not in remote
    assert remote["dtype"] == "unknown"


class OneAtATime:
    """The real backend, grouping requests one per model call, longest first (an engine
    that chooses its own batches), with its sessions counted."""

    def __init__(self, inner: HFBackend) -> None:
        self.inner = inner
        self.sessions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def batches(self, lengths: Sequence[int], size: int) -> list[list[int]]:
        return [[i] for i in sorted(range(len(lengths)), key=lambda i: -lengths[i])]

    @contextmanager
    def _session(self) -> Iterator[ModelSession]:
        self.sessions += 1
        with self.inner.session() as session:
            yield session

    def session(self) -> AbstractContextManager[ModelSession]:
        return self._session()


def test_the_engine_groups_the_arbiters_model_calls(tm: TrustMargin) -> None:
    engine = OneAtATime(tm.backend)
    assert isinstance(engine, Backend)
    items = [{"question": q, "passages": [p], "direct_answer": "Paris", "rag_answer": "Lyon"}
             for q, p in (("Capital of France?", "Lyon is the capital of France."),
                          ("Largest city of France, by far?", "Lyon is the largest city."),
                          ("Where is the Louvre?", "The Louvre is in Lyon."))]
    grouped = TrustMargin(engine, tm.config).arbitrate_batch(items)
    assert engine.sessions == 3  # the config's batch size (8) would make it one call
    plain = tm.arbitrate_batch(items)
    assert [d.m for d in grouped] == pytest.approx([d.m for d in plain], abs=1e-4)


def _fitted_file(tmp_path: Path, **fields: Any) -> Path:
    data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    data.update(fields)
    path = tmp_path / "policy.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_policy_from_another_backend_warns_naming_both(
        tm: TrustMargin, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tm.backend.model_id
    other = _fitted_file(tmp_path, model_id=model, backend_kind="openai", backend_model=model)
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations.policy_file"):
        TrustMargin.calibrated(tm.backend, other)
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"openai:{model}" in warning and f"hf:{model}" in warning
    caplog.clear()
    same = _fitted_file(tmp_path, model_id=model, backend_kind="hf", backend_model=model)
    old = _fitted_file(tmp_path / "old", model_id=model)  # written before the fields existed
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations.policy_file"):
        TrustMargin.calibrated(tm.backend, same)
        TrustMargin.calibrated(tm.backend, old)
    assert PolicyFile.load(old).backend_kind is None
    assert not caplog.records

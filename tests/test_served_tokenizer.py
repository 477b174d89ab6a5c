"""The remote backend's tokenizer without transformers equals the local backend's.

A remote-only install reads the served model's tokenizer with the ``tokenizers`` package
(backends/openai_compat/tokenizer.py): from the GGUF file's metadata, or from a Hugging Face
folder. The reference is the local backend's own transformers tokenizer (the real embedded
model's, from the conftest ``backend``): the same token ids with and without special tokens,
the same texts back, the same chat-templated prompts, so the remote backend counts, cuts and
scores exactly what the local one does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.backends.openai_compat.tokenizer import (
    ServedTokenizer,
    gguf_tokenizer,
    served_tokenizer,
)
from trustmargin_integrations.errors import ModelLoadError
from trustmargin_integrations.model_store import REGISTRY, resolve_model

TEXTS = [
    "Ridley Scott", " Ridley Scott", "Goiás", "1,234 km²", "TrustMargin checks: Goiás, 1,234 km².",
    "<|im_start|>user\nhi<|im_end|>\n", "<jupyter_code>x = 1", "  two  spaces\n\n\ttab ",
    "日本語のテキスト 😀", "ﬁ ligature, e\u0301, a\u200bb", "\ufffd", "don't I'll WE'RE",
    "12345678",
]
CONVERSATIONS = [
    [{"role": "user", "content": "Question:\nWho wrote Hamlet?\n\nAnswer:"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a bridge."},
     {"role": "assistant", "content": "Golden Gate"}, {"role": "user", "content": "Another?"}],
]


@pytest.fixture(scope="module")
def from_gguf() -> ServedTokenizer:
    return served_tokenizer("smollm2-135m")


def _assert_same(mine: ServedTokenizer, ref: Any, text: str) -> None:
    for special in (True, False):
        assert mine(text, add_special_tokens=special).input_ids == \
            ref(text, add_special_tokens=special).input_ids, (text, special)
    ids = ref(text, add_special_tokens=False).input_ids
    assert mine.decode(ids) == ref.decode(ids)
    assert [mine.decode([i]) for i in ids] == [ref.decode([i]) for i in ids]


def _assert_same_templates(mine: ServedTokenizer, ref: Any) -> None:
    assert mine.chat_template == ref.chat_template
    for conversation in CONVERSATIONS:
        for generation in (True, False):
            assert mine.apply_chat_template(conversation, add_generation_prompt=generation) == \
                ref.apply_chat_template(conversation, tokenize=False,
                                        add_generation_prompt=generation)


def test_the_gguf_tokenizer_is_the_local_backends(from_gguf: ServedTokenizer,
                                                  backend: Any) -> None:
    ref = backend.tokenizer
    for text in TEXTS:
        _assert_same(from_gguf, ref, text)
    assert from_gguf(TEXTS, add_special_tokens=False).input_ids == \
        ref(TEXTS, add_special_tokens=False).input_ids
    _assert_same_templates(from_gguf, ref)
    assert from_gguf.special_tokens == ref.special_tokens_map
    # Read once per file in a process: every remote backend of a run shares it.
    assert served_tokenizer("smollm2-135m") is from_gguf


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=40))
def test_any_text_tokenizes_as_the_local_backend_does(from_gguf: ServedTokenizer,
                                                       backend: Any, text: str) -> None:
    _assert_same(from_gguf, backend.tokenizer, text)


def test_a_hugging_face_folder_is_read_with_its_template_and_limit(backend: Any) -> None:
    _, folder = resolve_model("smollm2-135m")  # the local backend's converted folder
    assert folder is not None
    mine, ref = served_tokenizer(folder), backend.tokenizer
    for text in TEXTS:
        _assert_same(mine, ref, text)
    _assert_same_templates(mine, ref)
    assert mine.model_max_length == ref.model_max_length


def test_the_remote_backend_builds_its_prompts_from_a_model_name(backend: Any) -> None:
    # No request is sent: the URL is never contacted by rendering and counting.
    remote = OpenAICompatBackend("http://127.0.0.1:9", "smollm2", tokenizer="smollm2-135m")
    assert isinstance(remote.tokenizer, ServedTokenizer)
    message = "Question:\nWho wrote Hamlet?\n\nAnswer:"
    assert remote.render_prompt(message) == backend.render_prompt(message)
    assert remote.count_tokens_batch(TEXTS) == backend.count_tokens_batch(TEXTS)
    assert remote.truncate_tokens("one two three four", 2) == \
        backend.truncate_tokens("one two three four", 2)
    assert remote.context_window is None  # as before: the server's window is the server's
    assert load_tokenizer(backend.tokenizer) is backend.tokenizer


def test_unusable_sources_are_model_load_errors(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelLoadError, match=r"holds no tokenizer\.json"):
        served_tokenizer(tmp_path)
    with pytest.raises(ModelLoadError, match=r"is not a \.gguf file or a folder"):
        served_tokenizer(str(tmp_path / "missing.gguf"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelLoadError, match="could not read the tokenizer"):
        served_tokenizer(broken)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match="from the Hugging Face hub"):
        served_tokenizer("no-such-org/no-such-model-trustmargin")


def test_a_gguf_with_another_tokenizer_kind_is_refused_with_the_fix(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    path = tmp_path / "spm.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", "\u2581a"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match=r"'llama' tokenizer.*tokenizer\.json"):
        gguf_tokenizer(path)
    assert REGISTRY["smollm2-135m"].locate().suffix == ".gguf"

"""The served model's tokenizer without transformers: what a remote-only install tokenizes with.

A tokenizer source (a named model, a ``.gguf`` file, a folder with ``tokenizer.json``, a hub
id) becomes a :class:`ServedTokenizer` (the ``tokenizers`` package and jinja2), offering the
part of a transformers tokenizer the backends use. :func:`gguf_tokenizer` builds a GGUF file's
byte-level BPE tokenizer from its metadata as transformers' GGUF loader does; other GGUF
tokenizer kinds are refused with the fix (pass the folder or hub id).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import BackendError, InvalidInputError, ModelLoadError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
"""A Hugging Face model's tokenizer files (the first is required)."""

_GPT2_KIND = "gpt2"  # tokenizer.ggml.model of a byte-level BPE vocabulary

# The pre-tokenizer split of the byte-level vocabularies whose ``tokenizer.ggml.pre`` names
# one other than GPT-2's (the split their merges were learned on); any other byte-level file
# uses GPT-2's, as transformers' GGUF loader does.
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZER_SPLITS = {
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), _QWEN2_SPLIT),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe"), _LLAMA3_SPLIT),
}

# GGUF token types (llama.cpp's enum): a control token is special (e.g. <|im_end|>), a
# user-defined one an added token matched whole (e.g. <think>).
_CONTROL, _USER_DEFINED = 3, 4
_SPECIAL_IDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}


@dataclass(frozen=True)
class TokenIds:
    """Token ids of a text, or of each text of a list (``input_ids``, as transformers names
    them)."""

    input_ids: Any


class ServedTokenizer:
    """A ``tokenizers.Tokenizer`` with the model's chat template and special tokens.

    Args:
        backend: the tokenizer (``tokenizers.Tokenizer``).
        chat_template: the model's jinja chat template, or None for plain prompts.
        special_tokens: ``bos_token``, ``eos_token``, ... as texts, for the template.
        model_max_length: the tokenizer's declared limit, or None.
        source: what it was loaded from (for messages).
    """

    def __init__(self, backend: Any, *, chat_template: str | None,
                 special_tokens: Mapping[str, str], model_max_length: int | None,
                 source: str) -> None:
        self.backend = backend
        self.chat_template = chat_template or None
        self.special_tokens = dict(special_tokens)
        self.model_max_length = model_max_length
        self.source = source

    def __repr__(self) -> str:
        return f"ServedTokenizer(source={self.source!r})"

    def __call__(self, text: str | Sequence[str], add_special_tokens: bool = True) -> TokenIds:
        """Token ids of ``text`` (a list of texts: one list of ids each)."""
        if isinstance(text, str):
            return TokenIds(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)
        batch = self.backend.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return TokenIds([e.ids for e in batch])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens kept (as transformers' ``decode`` does)."""
        return str(self.backend.decode(list(ids), skip_special_tokens=False))

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *,
                            tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        """The conversation in the model's chat template, as text.

        Rendered the way transformers renders one (a sandboxed jinja2 environment with
        ``trim_blocks``, ``lstrip_blocks`` and loop controls; ``raise_exception``,
        ``strftime_now`` and a non-escaping ``tojson``; the special tokens as variables), so
        a prompt is the one the local backend builds.
        """
        if tokenize:
            raise InvalidInputError("tokenize", "is True, but this tokenizer renders text "
                                    "only", "pass tokenize=False and encode the text")
        if self.chat_template is None:
            raise BackendError(f"the tokenizer of {self.source} has no chat template. Fix: "
                               "check has_chat_template first, or pass a renderer")
        return str(self._template.render(messages=[dict(m) for m in messages], tools=None,
                                         documents=None,
                                         add_generation_prompt=add_generation_prompt,
                                         **self.special_tokens))

    @cached_property
    def _template(self) -> Any:
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
                   separators: Any = None, sort_keys: bool = False) -> str:
            # jinja2's own tojson escapes HTML characters, which a prompt must not get.
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            return env.from_string(self.chat_template or "")
        except jinja2.TemplateError as exc:
            raise ModelLoadError(f"the chat template of {self.source} cannot be rendered "
                                 f"here ({exc}). Fix: pass renderer= to the backend, or a "
                                 "transformers tokenizer (pip install "
                                 "'trustmargin-integrations[local]')") from exc


def served_tokenizer(source: str | os.PathLike[str]) -> ServedTokenizer:
    """The tokenizer ``source`` names: a named model (its GGUF file), a ``.gguf`` file, a
    folder holding ``tokenizer.json``, or a Hugging Face hub id (its tokenizer files only).

    Raises:
        ModelLoadError: the source is missing, holds no tokenizer, or is a GGUF whose
            tokenizer kind is not byte-level BPE.
    """
    from trustmargin_integrations.model_store import REGISTRY

    name = str(source)
    if name in REGISTRY:
        return gguf_tokenizer(REGISTRY[name].locate())
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return gguf_tokenizer(path)
    if path.is_dir():
        return folder_tokenizer(path)
    if path.exists() or name.startswith((".", "/", "~")) or name.endswith(".gguf"):
        raise ModelLoadError(f"tokenizer {name!r} is not a .gguf file or a folder. Fix: pass "
                             "the served model's folder (with tokenizer.json), its .gguf file, "
                             f"a Hugging Face id, or one of {sorted(REGISTRY)}")
    return hub_tokenizer(name)


def folder_tokenizer(folder: Path) -> ServedTokenizer:
    """A Hugging Face tokenizer folder: ``tokenizer.json``, with the chat template and
    special tokens of ``tokenizer_config.json`` (or ``chat_template.jinja``)."""
    if not (folder / TOKENIZER_FILES[0]).is_file():
        raise ModelLoadError(f"{folder} holds no tokenizer.json. Fix: pass the served model's "
                             "Hugging Face folder, its .gguf file or its hub id")
    return files_tokenizer({name: folder / name for name in TOKENIZER_FILES
                            if (folder / name).is_file()}, str(folder))


def files_tokenizer(files: Mapping[str, Path], source: str) -> ServedTokenizer:
    """The tokenizer of a Hugging Face model's tokenizer files (:data:`TOKENIZER_FILES`,
    by name; ``tokenizer.json`` required)."""
    from tokenizers import Tokenizer

    config_file, template_file = (files.get(name) for name in TOKENIZER_FILES[1:])
    try:
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file else {}
        backend = Tokenizer.from_file(str(files[TOKENIZER_FILES[0]]))
        template = (template_file.read_text(encoding="utf-8") if template_file
                    else config.get("chat_template"))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ModelLoadError(f"could not read the tokenizer of {source}: {exc}. Fix: pass an "
                             "intact tokenizer folder") from exc
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template
                         if isinstance(t, dict) and t.get("name") == "default"), None)
    limit = config.get("model_max_length") if isinstance(config, dict) else None
    return ServedTokenizer(
        backend, chat_template=template if isinstance(template, str) else None,
        special_tokens={key: text for key in _SPECIAL_IDS
                        if (text := _token_text(config.get(key))) is not None},
        model_max_length=limit if isinstance(limit, int) else None, source=source)


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: text, or ``{"content": text}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def hub_tokenizer(repo_id: str) -> ServedTokenizer:
    """The tokenizer files of a Hugging Face hub model (downloaded once into the hub cache;
    the weights are never fetched)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    files: dict[str, Path] = {}
    for filename in TOKENIZER_FILES:
        try:
            files[filename] = Path(hf_hub_download(repo_id, filename))
        except EntryNotFoundError as exc:
            if isinstance(exc, LocalEntryNotFoundError):  # offline and not cached: not a 404
                raise _unreachable(repo_id, exc) from exc
            if filename == TOKENIZER_FILES[0]:
                raise ModelLoadError(f"{repo_id!r} on the Hugging Face hub has no "
                                     "tokenizer.json. Fix: pass the served model's folder or "
                                     ".gguf file") from None
        except Exception as exc:  # unreachable, unknown repository, gated model, ...
            raise _unreachable(repo_id, exc) from exc
    return files_tokenizer(files, repo_id)


def _unreachable(repo_id: str, exc: Exception) -> ModelLoadError:
    return ModelLoadError(f"could not fetch the tokenizer of {repo_id!r} from the Hugging "
                          f"Face hub ({type(exc).__name__}: {exc}). Fix: pass the served "
                          "model's folder (with tokenizer.json) or .gguf file, or a hub id "
                          "this machine can reach")


def gguf_tokenizer(path: Path) -> ServedTokenizer:
    """The byte-level BPE tokenizer a GGUF file's metadata describes, with its chat template.

    Built once per file version in a process (reading a GGUF's metadata takes seconds, and
    every remote backend of a run reads the same file; the tokenizer is never modified).

    Raises:
        ModelLoadError: not a readable GGUF, or its tokenizer is not byte-level BPE.
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelLoadError(f"could not read {path}: {exc}. Fix: pass an existing .gguf "
                             "file") from exc
    return _gguf_tokenizer(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _gguf_tokenizer(path_text: str, size: int, mtime_ns: int) -> ServedTokenizer:
    """:func:`gguf_tokenizer` for one version of a file (size and mtime are the cache key)."""
    path = Path(path_text)
    metadata = _gguf_metadata(path)
    kind = metadata.get("tokenizer.ggml.model")
    if kind != _GPT2_KIND:
        raise ModelLoadError(
            f"{path} holds a {kind!r} tokenizer; only byte-level BPE ('gpt2': Qwen, Llama 3, "
            "SmolLM, ...) is rebuilt from a GGUF here. Fix: pass the model's Hugging Face "
            "folder (with tokenizer.json) or hub id as the tokenizer")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types: list[int] = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    special = {key: tokens[index] for key, field in _SPECIAL_IDS.items()
               if isinstance(index := metadata.get(f"tokenizer.ggml.{field}"), int)
               and 0 <= index < len(tokens)}
    backend = _byte_level_bpe(tokens, types, metadata.get("tokenizer.ggml.merges") or [],
                              metadata.get("tokenizer.ggml.pre"))
    _add_post_processor(backend, special,
                        bos=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
                        eos=bool(metadata.get("tokenizer.ggml.add_eos_token", False)))
    # transformers reports no limit for a GGUF tokenizer either; the served window is the
    # server's (context_window= on the backend sets it).
    return ServedTokenizer(backend, chat_template=metadata.get("tokenizer.chat_template"),
                           special_tokens=special, model_max_length=None, source=str(path))


def _gguf_metadata(path: Path) -> dict[str, Any]:
    """The ``tokenizer.*`` metadata of a GGUF file as Python values."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path), "r")
        return {key: field.contents() for key, field in reader.fields.items()
                if key.startswith("tokenizer.")}
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ModelLoadError(f"could not read the tokenizer metadata of {path}: {exc}. Fix: "
                             "pass an intact .gguf file") from exc


def _byte_level_bpe(tokens: list[str], types: list[int], merges: list[str],
                    pre: str | None) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    # A token stored as raw text (outside the byte alphabet) is respelled into it, so that
    # the merges, which are written in that alphabet, find it.
    vocab = {token if set(token) <= spelled
             else "".join(alphabet[b] for b in token.encode("utf-8")): index
             for index, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    backend = Tokenizer(BPE(vocab=vocab, merges=pairs, dropout=None,
                            continuing_subword_prefix="", end_of_word_suffix="",
                            fuse_unk=False))
    split = PRE_TOKENIZER_SPLITS.get(pre or "")
    backend.pre_tokenizer = (
        pre_tokenizers.ByteLevel(add_prefix_space=False) if split is None
        else pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    backend.decoder = decoders.ByteLevel()
    # A control token outside the byte alphabet is a mislabel in the file (llama.cpp's
    # own loader skips such ones too): adding it would grow the vocabulary.
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                for t, kind in zip(tokens, types, strict=False)
                                if kind == _CONTROL and set(t) <= spelled])
    user = [AddedToken(t, normalized=False, special=False)
            for t, kind in zip(tokens, types, strict=False) if kind == _USER_DEFINED]
    if user:
        backend.add_tokens(user)
    return backend


def _add_post_processor(backend: Any, special: Mapping[str, str], *, bos: bool,
                        eos: bool) -> None:
    """BOS/EOS around a text encoded with special tokens, where the file asks for them."""
    from tokenizers import processors

    first = special.get("bos_token") if bos else None
    last = special.get("eos_token") if eos else None
    ends = [token for token in (first, last) if token is not None]
    single = [*ends[:1 if first else 0], "$A", *([last] if last else [])]
    backend.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(t, backend.token_to_id(t)) for t in dict.fromkeys(ends)])


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-to-character table: printable bytes stand for themselves, the others
    are shifted past 255 so that every byte has a visible character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table

"""Backend specs: the one text form that names an engine and its model.

``--backend``, ``TrustMargin.from_pretrained(...)`` and
:func:`~trustmargin_integrations.backends.loading.load_backend` take a spec: ``hf:MODEL`` (or
``MODEL``) for the local transformers backend, ``openai:URL#MODEL`` or
``openai:URL#model=NAME&tokenizer=SRC`` for an OpenAI-compatible server. ``--model M`` and
``--remote-url U [--remote-model R]`` are shorthands (:meth:`BackendSpec.from_shorthand`).
Why the served name is part of the spec: docs/decisions.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trustmargin_integrations.errors import InvalidInputError, clip
from trustmargin_integrations.urls import redact_url, split_fragment

DEFAULT_MODEL = "smollm2-135m"
"""The model a command loads when no backend is named (the embedded SmolLM2-135M)."""

BackendKind = Literal["hf", "openai"]
KINDS: tuple[BackendKind, ...] = ("hf", "openai")

_FORMS = ("hf:MODEL (e.g. hf:smollm2-135m, hf:/path/to/model), a bare model name, or "
          "openai:URL#MODEL (e.g. openai:http://127.0.0.1:8000/v1#smollm2-135m)")


# The longest path a file system resolves (PATH_MAX) and the longest name of one folder or
# file in it (NAME_MAX): a longer model name can be no path, directory or Hugging Face id,
# and reading it as a path failed with "OSError: File name too long" after the checks.
_PATH_MAX, _NAME_MAX = 4096, 255


def _model_name(name: str, field: str) -> str:
    """``name`` when it can name a model (a named model, a path, a Hugging Face id)."""
    longest = max((len(part) for part in name.replace("\\", "/").split("/")), default=0)
    if len(name) > _PATH_MAX or longest > _NAME_MAX:
        raise InvalidInputError(field, f"the model name {clip(repr(name))} is {len(name):,} "
                                "characters long, longer than any model name or path",
                                f"pass {_FORMS}")
    return name


@dataclass(frozen=True)
class BackendSpec:
    """One engine and its model, parsed and checked (nothing loaded).

    Attributes:
        kind: ``hf`` (local transformers) or ``openai`` (an OpenAI-compatible server).
        model: the model: for ``hf`` what to load, for ``openai`` the served model name.
        url: the server URL (``openai`` only).
        tokenizer: where the ``openai`` backend loads its tokenizer (default: ``model``).
    """

    kind: BackendKind
    model: str
    url: str | None = None
    tokenizer: str | None = None

    @classmethod
    def parse(cls, text: str, field: str = "--backend") -> BackendSpec:
        """The spec ``text`` names.

        Raises:
            InvalidInputError: (named ``field``) not a spec, an unknown kind, an ``openai``
                spec without a URL or a served model name.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(field, f"must be a model name, directory, .gguf file or "
                                    f"Hugging Face id, or a backend spec, got {clip(repr(text))}",
                                    f"pass {_FORMS}")
        text = text.strip()
        kind, sep, rest = text.partition(":")
        # A bare name, a path (C:\... or ./x) or an HF id has no known kind before its colon.
        if not sep or kind not in KINDS:
            if sep and kind.isalpha() and len(kind) > 1 and not rest.startswith("\\"):
                raise InvalidInputError(field, f"unknown backend kind {clip(repr(kind))} in "
                                        f"{clip(repr(text))}",
                                        f"use one of {', '.join(KINDS)}: {_FORMS}")
            return cls("hf", _model_name(text, field))
        if kind == "hf":
            if not rest.strip():
                raise InvalidInputError(field, f"{clip(repr(text))} names no model",
                                        f"pass {_FORMS}")
            return cls("hf", _model_name(rest.strip(), field))
        return cls._parse_openai(text, rest, field)

    @classmethod
    def _parse_openai(cls, text: str, rest: str, field: str) -> BackendSpec:
        from trustmargin_integrations.backends.openai_compat.settings import check_server_url

        # Credentials first: a "#" inside a password is not the spec's "#MODEL".
        url, fragment = split_fragment(rest)
        check_server_url(url, field)
        values: dict[str, str] = {}
        for i, item in enumerate(p for p in fragment.split("&") if p):
            key, eq, value = item.partition("=")
            if not eq and i == 0:
                key, value = "model", item
            if key not in ("model", "tokenizer") or not value.strip() or key in values:
                raise InvalidInputError(field, f"{clip(repr(item))} after '#' in an openai "
                                        "spec is not model=NAME or tokenizer=SOURCE (once each)",
                                        "write openai:URL#MODEL or "
                                        "openai:URL#model=NAME&tokenizer=SOURCE")
            values[key] = value.strip()
        if "model" not in values:
            raise InvalidInputError(field, f"{redact_url(url)!r} names no served model",
                                    f"add it after '#': openai:{redact_url(url)}#MODEL "
                                    "(GET URL/v1/models lists the served names)")
        tokenizer = values.get("tokenizer")
        return cls("openai", _model_name(values["model"], field), url=url,
                   tokenizer=None if tokenizer is None else _model_name(tokenizer, field))

    @classmethod
    def coerce(cls, value: str | BackendSpec, field: str = "model") -> BackendSpec:
        """A spec as it is, or parsed from its text."""
        return value if isinstance(value, BackendSpec) else cls.parse(value, field)

    @classmethod
    def from_shorthand(cls, model: str | None, remote_url: str | None = None,
                       remote_model: str | None = None) -> BackendSpec:
        """The spec the older options name (the one place they are mapped):
        ``--model M`` is ``hf:M``; with ``--remote-url U`` it is the server at ``U`` serving
        ``--remote-model`` (default ``M``) with ``M``'s tokenizer."""
        name = model or DEFAULT_MODEL
        if remote_url is None:
            if remote_model is not None:
                raise InvalidInputError("--remote-model", "needs --remote-url",
                                        "pass --remote-url URL too, or "
                                        "--backend openai:URL#MODEL")
            return cls.parse(name, "--model")
        # The URL is checked where it always was, by the backend as it loads.
        return cls("openai", remote_model or name, url=remote_url, tokenizer=name)

    @property
    def tokenizer_source(self) -> str:
        """Where a server backend's tokenizer comes from (its own, or the model's)."""
        return self.tokenizer or self.model

    def __str__(self) -> str:
        """The spec as text, without credentials, query or fragment in its URL."""
        if self.kind == "hf":
            return f"hf:{self.model}"
        extra = f"&tokenizer={self.tokenizer}" if self.tokenizer else ""
        return f"openai:{redact_url(self.url or '')}#model={self.model}{extra}"

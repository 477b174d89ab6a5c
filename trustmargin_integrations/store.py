"""The one resumable-results store: an append-only, crash-safe JSONL cache of results.

``trustmargin eval`` (``cache.jsonl`` in the run directory) and ``trustmargin score``
(``OUTPUT.cache``) keep their finished work here, filled by
:func:`~trustmargin_integrations.resumable.run_chunks`. Each line is a self-checking
``{"key", "sha", "value"}`` record keyed by :func:`cache_key`, a content hash of everything
that determines the result; a torn or corrupt line is ignored and the newest valid record of
a key wins. Why this design:
docs/decisions.md, "One append-only, self-checking result store".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import check_destination, check_regular_file, open_append

# Part of every cache key. Bump it when a change to candidate generation, answer cleaning or
# scoring alters cached values, so old entries stop matching. (Deliberately not the package
# version: reinstalling the package must not throw away hours of cached results.)
CODE_VERSION = "trustmargin-eval-1"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cache_key(
    *,
    model_id: str,
    prompt_version: str,
    question: str,
    passages: Sequence[str],
    settings: Mapping[str, Any],
    direct_answer: str | None = None,
    rag_answer: str | None = None,
    code_version: str = CODE_VERSION,
) -> str:
    """Content hash of one example's inputs (hex sha256).

    ``settings`` holds whatever else changes the result (dtype, context budget, generation
    length, and for ``score`` lambda and tau; ``eval`` leaves the rule's hyper-parameters out
    because it replays decisions from the cached likelihoods).
    """
    payload = {
        "model_id": model_id,
        "prompt_version": prompt_version,
        "code_version": code_version,
        "settings": dict(settings),
        "question": question,
        "passages": list(passages),
        "direct_answer": direct_answer,
        "rag_answer": rag_answer,
    }
    return hashlib.sha256(_canonical(payload).encode("utf-8")).hexdigest()


class ResultStore:
    """Append-only JSONL store: ``put`` once per computed example, ``get`` on resume.

    Args:
        path: the JSONL file (created with its parent folder when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._values: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        self._load()

    def _load(self) -> None:
        check_destination(self.path)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return
        # Bytes, not text: a write torn inside a multi-byte character must cost that line only.
        with os.fdopen(fd, "rb") as handle:
            check_regular_file(self.path, os.fstat(handle.fileno()))
            for line in handle:
                record = self._parse(line)
                if record is None:
                    if line.strip():
                        self.skipped_lines += 1
                    continue
                self._values[record["key"]] = record["value"]

    @staticmethod
    def _parse(line: bytes) -> dict[str, Any] | None:
        if not line.endswith(b"\n"):
            return None  # torn final line of an interrupted write
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("value"), dict):
            return None
        sha = hashlib.sha256(_canonical(record["value"]).encode("utf-8")).hexdigest()
        return record if sha == record.get("sha") else None

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def get(self, key: str) -> dict[str, Any] | None:
        """The newest valid value stored under ``key``, or None."""
        return self._values.get(key)

    def require(self, key: str, field: str, problem: str, fix: str) -> dict[str, Any]:
        """The value under ``key``; a typed error (``field``, ``problem``, ``fix``) without."""
        value = self._values.get(key)
        if value is None:
            raise InvalidInputError(field, problem, fix)
        return value

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Append one record and make it durable (flush + fsync) before returning."""
        if not isinstance(key, str) or not key:
            raise InvalidInputError("key", "must be a non-empty string", "use cache_key(...)")
        data = json.loads(_canonical(dict(value)))  # a JSON-safe private copy
        line = _canonical({"key": key, "sha": hashlib.sha256(
            _canonical(data).encode("utf-8")).hexdigest(), "value": data})
        fd = open_append(self.path)
        try:
            # The lock makes "is the last line torn?" and the append one step across processes
            # (two runs on one store); one write() per record keeps records whole.
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
            _write_all(fd, (b"\n" if torn else b"") + line.encode("utf-8") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)  # also releases the lock
        self._values[key] = data


def _write_all(fd: int, data: bytes) -> None:
    """One write() in practice; loops only if the kernel takes part (a signal, a full disk)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

"""``trustmargin score``: arbitrate a JSONL file of another system's candidates, resumably.

The whole input is validated before the model loads (errors name ``FILE:LINE.field``);
results go to the resumable store (``OUTPUT.cache``) keyed by everything that changes a
decision; the output is written in input order with
:func:`~trustmargin_integrations.files.atomic_output`. Extra keys of a record are carried to
its Decision under ``metadata``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustmargin_integrations import strict_json
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import atomic_output, same_file
from trustmargin_integrations.output_guard import guard_output
from trustmargin_integrations.prompts import PROMPT_VERSION, form_prompts
from trustmargin_integrations.resumable import run_chunks
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.store import ResultStore, cache_key
from trustmargin_integrations.validation import FIELDS, ArbitrationInput, validate_input

REQUIRED = ("question", "passages", "direct_answer", "rag_answer")
CACHE_SUFFIX = ".cache"


@dataclass(frozen=True)
class ScoreRecord:
    """One validated input line: what to arbitrate, and its key in the store."""

    line: int
    item: dict[str, Any]
    input: ArbitrationInput
    """The line's input, validated once, when the file was read."""
    key: str
    id: str | None
    where: str = ""
    """How errors and warnings name this record (``FILE:LINE``)."""


@dataclass(frozen=True)
class ScoreReport:
    """What a ``score`` run did."""

    records: int
    reused: int
    computed: int
    output: Path
    cache: Path


def cache_path(output: Path) -> Path:
    """Where the resumable store of ``output`` lives."""
    return output.with_name(output.name + CACHE_SUFFIX)


def check_paths(input_path: Path, output: Path, calibration: Path | None = None) -> None:
    """Refuse the path combinations that would lose data or cannot work, before any work:
    the output and its store go through the one output guard (never an input, never a run
    directory's own files, never a link, a directory or a special file), and the input must
    not be the output's store."""
    if not input_path.is_file():
        raise InvalidInputError("--input", f"{input_path} is not a file", "pass a JSONL file")
    store = cache_path(output)
    if same_file(input_path, store):  # also through a hard link
        raise InvalidInputError("--input", f"is the store of {output} (results of an earlier "
                                "run)", "pass the candidates file, not OUTPUT.cache")
    inputs = {"--input": input_path}
    if calibration is not None:
        inputs["--calibration"] = calibration
    # The input's own store holds the results of the run that wrote the input.
    protected = {cache_path(input_path): f"the result store of {input_path}"}
    for path in (output, store):
        guard_output(path, "--output", inputs=inputs, protected=protected)


def read_records(path: Path, settings: Mapping[str, Any]) -> list[ScoreRecord]:
    """Parse and validate every line of a candidates file before any model work, and key
    each record in the store under ``settings``.

    Raises:
        InvalidInputError: naming ``FILE:LINE`` (and the field) of the first bad line.
    """
    return [checked.keyed(settings) for checked in validate_file(path)]


@dataclass(frozen=True)
class _Checked:
    """One validated input line, not keyed yet."""

    line: int
    item: dict[str, Any]
    valid: ArbitrationInput
    where: str

    def keyed(self, settings: Mapping[str, Any]) -> ScoreRecord:
        """The record with its store key under ``settings``."""
        key = cache_key(model_id=str(settings["model"]), prompt_version=PROMPT_VERSION,
                        question=self.valid.question, passages=self.valid.contexts,
                        settings=settings, direct_answer=self.valid.direct_answer,
                        rag_answer=self.valid.rag_answer)
        return ScoreRecord(self.line, self.item, self.valid, key, self.valid.id, self.where)


def validate_file(path: Path) -> list[_Checked]:
    """Parse and validate every line of a candidates file (no key, nothing loaded).

    Raises:
        InvalidInputError: naming ``FILE:LINE`` (and the field) of the first bad line.
    """
    records: list[_Checked] = []
    for number, line in strict_json.lines(path):
        where = f"{path}:{number}"
        record = strict_json.loads(line, where, "write one JSON object per line")
        if not isinstance(record, dict):
            raise InvalidInputError(where, f"is a JSON {type(record).__name__}, not an "
                                    "object", "write one JSON object per line")
        records.append(_record(record, where, number))
    if not records:
        raise InvalidInputError("--input", f"{path} holds no record",
                                "write one JSON object per line: question, passages, "
                                "direct_answer, rag_answer")
    return records


def _record(record: dict[str, Any], where: str, number: int) -> _Checked:
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise InvalidInputError(f"{where}.{missing[0]}", "is missing",
                                f"every line needs {', '.join(REQUIRED)}")
    for key in ("direct_answer", "rag_answer"):
        if not isinstance(record[key], str):
            raise InvalidInputError(f"{where}.{key}", "must be a string",
                                    "give both candidates as text (score never generates)")
    extra = {k: v for k, v in record.items() if k not in FIELDS}
    metadata = record.get("metadata") or {}
    if isinstance(metadata, Mapping):
        clash = sorted(set(extra) & set(metadata))
        if clash:
            raise InvalidInputError(f"{where}.{clash[0]}", "is both a key and a metadata key",
                                    "keep each extra key in one place")
        metadata = {**metadata, **extra}
    item = {k: record[k] for k in FIELDS if k in record and k != "metadata"}
    item["metadata"] = metadata
    item.setdefault("id", str(number))
    return _Checked(number, item, validate_input(item, where=where), where)


def key_settings(
    model: str, config: TrustMarginConfig, **backend: str | int | None
) -> dict[str, Any]:
    """Everything besides the record that changes a decision (the key's ``settings``)."""
    rule = config.model_dump(exclude={"batch_size"})
    return {"model": model, "config": rule, **form_prompts(config.scoring_form),
            **{k: v for k, v in backend.items() if v}}


def server_identity(specs: Sequence[Any]) -> dict[str, str]:
    """The key settings of a server run: the served model and the tokenizer the prompts are
    counted with, the same for every fleet of that model (members are checked to serve the
    same numbers as they load), so reordering the URLs, one member or a ``/v1`` suffix
    resumes the run; a URL list keyed every fleet apart."""
    first = specs[0]
    return {"engine": f"{first.kind}:{first.model}", "tokenizer": first.tokenizer_source}


def run_score(
    input_path: Path,
    output: Path,
    settings: Mapping[str, Any],
    load: Callable[[], TrustMargin],
    *,
    batch_size: int,
    progress: bool = True,
    on_reuse: Callable[[int, int], None] | None = None,
    calibration: Path | None = None,
    numerics: Callable[[], Mapping[str, Any]] | None = None,
) -> ScoreReport:
    """Validate, compute what is missing (durably, batch by batch), write OUTPUT atomically.

    Args:
        input_path: the candidates JSONL.
        output: the decisions JSONL (written once, complete, at the end).
        settings: :func:`key_settings` of this run.
        load: builds the arbiter; called only when something is left to compute.
        batch_size: questions per model call (and per durable write).
        progress: show a progress bar.
        on_reuse: told (reused, to compute) before any model work starts.
        calibration: the policy file the run reads, if any (never written over).
        numerics: further key settings that are slow to learn (the local model's CPU thread
            count, which imports torch), asked once the whole file is valid, so a bad line
            still stops the run at once.
    """
    check_paths(input_path, output, calibration)
    checked = validate_file(input_path)
    settings = {**settings, **(numerics() if numerics else {})}
    records = [c.keyed(settings) for c in checked]
    store = ResultStore(cache_path(output))
    every = {r.key: r for r in reversed(records)}  # one record per key, the first one
    todo = [r for r in every.values() if r.key not in store]
    reused = len(every) - len(todo)
    if on_reuse is not None:
        on_reuse(reused, len(todo))
    if todo:
        tm = load()

        def arbitrate(chunk: Sequence[ScoreRecord]) -> list[dict[str, Any]]:
            # Validated when the file was read (warnings name its line); window errors name
            # the line too, not a place inside an internal batch.
            prepared = tm.prepare_batch([r.input for r in chunk], wheres=[r.where for r in chunk])
            return [d.model_dump(mode="json") for d in tm.arbitrate_batch(prepared)]

        # All records in file order, not only the missing ones: chunk composition (and so
        # every number) is the same as in an uninterrupted run (see run_chunks).
        run_chunks(store, [r for r in records if every[r.key] is r], key=lambda r: r.key,
                   compute=arbitrate, batch_size=batch_size, desc="scoring",
                   progress=progress)
    _write_output(output, records, store)
    return ScoreReport(len(records), reused, len(todo), output, store.path)


def _write_output(output: Path, records: list[ScoreRecord], store: ResultStore) -> None:
    with atomic_output(output) as handle:
        for rec in records:
            value = store.require(rec.key, str(store.path), f"lacks line {rec.line}",
                                  "run the same `trustmargin score` command again")
            # Identical records share one result; each line keeps its own id and data.
            decision = Decision.model_validate(value).model_copy(
                update={"id": rec.id, "metadata": rec.item["metadata"]})
            handle.write(decision.model_dump_json() + "\n")

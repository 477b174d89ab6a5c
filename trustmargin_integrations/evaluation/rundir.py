"""The run directory: ``cache.jsonl`` (the result store) and ``manifest.json`` (what was run).

The manifest lists, per dataset, which examples (id, gold aliases, cache key) and which noise
items belong to the run, with the model, settings and command. Reports are rebuilt from the
manifest and the cache alone: no model, no data directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.records import (
    EvalRecord,
    NoiseRecord,
    PipelineRecord,
    read_eval_record,
    read_noise_record,
    read_pipeline_record,
)
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.output_guard import (
    CACHE_FILE,
    MANIFEST_FILE,
    inside_run,
)
from trustmargin_integrations.store import ResultStore


@dataclass
class DatasetRun:
    """Everything recorded for one dataset of a run."""

    name: str
    records: list[EvalRecord]
    noise: list[NoiseRecord] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    pipelines: dict[str, list[PipelineRecord]] = field(default_factory=dict)
    """Pipeline name -> one record per question it ran on (``eval --pipeline``)."""

    @property
    def chain_answers(self) -> bool:
        """True when the run arbitrated a user's chain's own two answers (records with
        ``direct_answer`` and ``rag_answer``) rather than the model's short answers: their
        texts are graded whole, and ``scoring_form`` in :attr:`info` says how they were
        compared."""
        return self.info.get("candidates") == CHAIN_CANDIDATES


CHAIN_CANDIDATES = "chain"
"""The manifest's ``candidates`` value of a dataset whose records gave their chain's answers."""


def open_store(run_dir: str | Path) -> ResultStore:
    """The run's result cache (created when missing; never a link or a hard-linked file)."""
    return ResultStore(inside_run(run_dir, CACHE_FILE))


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = inside_run(run_dir, MANIFEST_FILE)
    if not path.is_file():
        return {"datasets": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def _write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    write_text_atomic(inside_run(run_dir, MANIFEST_FILE),
                      json.dumps(manifest, indent=1, ensure_ascii=False))


def chain_info(examples: Sequence[EvalExample], scoring_form: str) -> dict[str, str]:
    """The manifest fields of a dataset whose records give their chain's own answers: that
    they do, and the scoring form they were compared under (empty for the model's own)."""
    if not any(e.chain is not None for e in examples):
        return {}
    return {"candidates": CHAIN_CANDIDATES, "scoring_form": scoring_form}


def record_dataset(
    run_dir: str | Path,
    name: str,
    records: Sequence[EvalRecord],
    info: dict[str, Any],
    noise: Sequence[NoiseRecord] = (),
    noise_info: dict[str, Any] | None = None,
    pipelines: Mapping[str, Sequence[PipelineRecord]] | None = None,
    pipeline_info: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Write (or replace) one dataset's entry in the manifest.

    ``pipelines`` (name -> records) replace the entry's records of those pipelines; the
    entry's other pipelines are kept, so runs of different pipelines add up."""
    root = Path(run_dir)
    manifest = _read_manifest(root)
    entry: dict[str, Any] = {
        **info,
        "examples": [{"id": r.example.id, "answers": list(r.example.answers), "key": r.key,
                      "type": r.example.meta.get("type")} for r in records],
    }
    old = manifest["datasets"].get(name, {})
    if noise:
        entry["noise"] = {**(noise_info or {}),
                          "items": [{"id": n.example.id, "level": n.n_replaced, "key": n.key}
                                    for n in noise]}
    elif "noise" in old:
        entry["noise"] = old["noise"]
    piped = dict(old.get("pipelines", {}))
    for pipe, recs in (pipelines or {}).items():
        piped[pipe] = {**(pipeline_info or {}).get(pipe, {}),
                     "items": [{"id": r.example.id, "key": r.key} for r in recs]}
    if piped:
        entry["pipelines"] = piped
    manifest["datasets"][name] = entry
    _write_manifest(root, manifest)


def load_run(run_dir: str | Path) -> list[DatasetRun]:
    """Rebuild every dataset's records (and noise records) from the manifest and the cache."""
    root = Path(run_dir)
    if not (root / MANIFEST_FILE).is_file():
        raise InvalidInputError("run_dir", f"{root} holds no {MANIFEST_FILE}",
                                "run `trustmargin eval --run-dir DIR` first")
    manifest = _read_manifest(root)
    store = open_store(root)
    runs = []
    for name, entry in manifest["datasets"].items():
        records = [_read_example(store, name, item) for item in entry["examples"]]
        by_id = {rec.example.id: rec.example for rec in records}
        noise_entry = entry.get("noise")
        noise = [read_noise_record(store, by_id[item["id"]], item["level"], item["key"])
                 for item in (noise_entry or {}).get("items", [])]
        pipelines = {pipe: [read_pipeline_record(store, by_id[item["id"]], pipe, item["key"])
                            for item in pipe_entry["items"]]
                     for pipe, pipe_entry in (entry.get("pipelines") or {}).items()}
        info = {k: v for k, v in entry.items() if k not in ("examples", "noise", "pipelines")}
        if noise_entry:
            info["noise"] = {k: v for k, v in noise_entry.items() if k != "items"}
        runs.append(DatasetRun(name=name, records=records, noise=noise, info=info,
                               pipelines=pipelines))
    return runs


def _read_example(store: ResultStore, dataset: str, item: Mapping[str, Any]) -> EvalRecord:
    """One manifest example as a record; its question comes from the stored Decision."""
    meta = {"type": item["type"]} if item.get("type") else {}
    example = EvalExample(dataset=dataset, id=item["id"], question="",
                          answers=tuple(item["answers"]), meta=meta)
    record = read_eval_record(store, example, item["key"])
    return replace(record, example=replace(example, question=record.decision.question))

"""The run directory: ``cache.jsonl`` (the result store) and ``manifest.json`` (what was run).

The manifest lists, per dataset, which examples (id, gold aliases, cache key) and which noise
items belong to the run, with the model, settings and command. Reports are rebuilt from the
manifest and the cache alone: no model, no data directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.runner import EvalRecord, NoiseRecord
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.store import ResultStore

if TYPE_CHECKING:
    from trustmargin_integrations.evaluation.pipeline_runner import PipelineRecord

CACHE_FILE = "cache.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass
class DatasetRun:
    """Everything recorded for one dataset of a run."""

    name: str
    records: list[EvalRecord]
    noise: list[NoiseRecord] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    pipelines: dict[str, list[PipelineRecord]] = field(default_factory=dict)
    """Pipeline name -> one record per question it ran on (``eval --pipeline``)."""


def open_store(run_dir: str | Path) -> ResultStore:
    """The run's result cache (created when missing)."""
    return ResultStore(Path(run_dir) / CACHE_FILE)


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST_FILE
    if not path.is_file():
        return {"datasets": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def _write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (MANIFEST_FILE + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(run_dir / MANIFEST_FILE)


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
        records = []
        by_id: dict[str, EvalRecord] = {}
        for item in entry["examples"]:
            value = store.get(item["key"])
            if value is None:
                raise InvalidInputError("run_dir", f"cache lacks {name}:{item['id']}",
                                        "re-run the same `trustmargin eval` command to fill it")
            meta = {"type": item["type"]} if item.get("type") else {}
            ex = EvalExample(dataset=name, id=item["id"], question=value["decision"]["question"],
                             answers=tuple(item["answers"]), meta=meta)
            rec = EvalRecord(example=ex, key=item["key"], passages=(),
                             decision=Decision.model_validate(value["decision"]),
                             retrieval_s=float(value.get("retrieval_s", 0.0)), computed=False)
            records.append(rec)
            by_id[ex.id] = rec
        noise = []
        noise_entry = entry.get("noise")
        if noise_entry:
            for item in noise_entry["items"]:
                value = store.get(item["key"])
                if value is None:
                    raise InvalidInputError("run_dir", f"cache lacks noise item {item['id']}",
                                            "re-run the same `trustmargin eval` command")
                noise.append(NoiseRecord(by_id[item["id"]].example, item["level"],
                                         Decision.model_validate(value["decision"]),
                                         item["key"]))
        pipelines = {}
        if entry.get("pipelines"):
            from trustmargin_integrations.evaluation.pipeline_runner import read_record

            for pipe, pipe_entry in entry["pipelines"].items():
                pipelines[pipe] = [read_record(store, by_id[item["id"]].example, pipe,
                                               item["key"]) for item in pipe_entry["items"]]
        info = {k: v for k, v in entry.items() if k not in ("examples", "noise", "pipelines")}
        if noise_entry:
            info["noise"] = {k: v for k, v in noise_entry.items() if k != "items"}
        runs.append(DatasetRun(name=name, records=records, noise=noise, info=info,
                               pipelines=pipelines))
    return runs

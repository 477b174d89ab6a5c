"""Benchmark loaders: local files by path, and documented downloaders for online machines.

Local files are JSON lists or JSONL of ``{test_id, question, answer}`` records, optionally
with precomputed ``passages`` (and ``type``). Named datasets (``cwq``, ``2wiki``,
``hotpotqa``) resolve to files under a data directory (:data:`NAMED_DATASETS`); data is read
where it lies. The ``download_*`` functions fetch the same files over HTTPS (untested here:
docs/decisions.md).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trustmargin_integrations import strict_json
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import write_text_atomic
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import is_blank_text


@dataclass(frozen=True)
class ChainAnswers:
    """The two answers a user's own chain gave to one question, as text: run once without
    retrieval (``direct_answer``) and once with it (``rag_answer``). The domain check then
    arbitrates these texts instead of generating the paper's short answers."""

    direct: str
    rag: str


@dataclass(frozen=True)
class EvalExample:
    """One benchmark question with its gold aliases and, when shipped, its passages (and,
    in a labeled file of a user's chain, that chain's two answers)."""

    dataset: str
    id: str
    question: str
    answers: tuple[str, ...]
    passages: tuple[Passage, ...] | None = None
    meta: dict[str, str] = field(default_factory=dict)
    chain: ChainAnswers | None = None


@dataclass(frozen=True)
class NamedDataset:
    """Where a named dataset's files lie relative to the data directory."""

    files: tuple[str, ...]
    corpus: str | None
    description: str


NAMED_DATASETS: dict[str, NamedDataset] = {
    "cwq": NamedDataset(
        files=("prag/complexwebquestions_total.json",),
        corpus=None,
        description="ComplexWebQuestions dev test_id 0-199 with BM25 top-3 DPR-wiki passages",
    ),
    "2wiki": NamedDataset(
        files=("prag/2wikimultihopqa_compositional.json", "prag/2wikimultihopqa_comparison.json"),
        corpus="hipporag/2wikimultihopqa_corpus.json",
        description="2WikiMultihopQA dev (compositional + comparison) with BM25 top-3 "
                    "DPR-wiki passages",
    ),
    "hotpotqa": NamedDataset(
        files=("prag/hotpotqa_bridge.json", "prag/hotpotqa_comparison.json"),
        corpus=None,
        description="HotpotQA dev (bridge + comparison) with BM25 top-3 DPR-wiki passages: "
                    "a retrieval-dominant domain the paper does not use",
    ),
    "cwq-1000": NamedDataset(
        files=("trustmargin/complexwebquestions_dev.json",),
        corpus=None,
        description="the paper's 1000 ComplexWebQuestions dev questions (no passages)",
    ),
    "2wiki-1000": NamedDataset(
        files=("trustmargin/2wikimultihopqa_dev.json",),
        corpus="hipporag/2wikimultihopqa_corpus.json",
        description="the paper's 1000 2WikiMultihopQA dev questions (no passages)",
    ),
}


def _gold(record: dict[str, Any], where: str) -> tuple[str, ...]:
    answer = record.get("answer", record.get("answers"))
    if isinstance(answer, str):
        aliases = [answer]
    elif isinstance(answer, list) and all(isinstance(a, str) for a in answer):
        aliases = list(answer)
    else:
        raise InvalidInputError(f"{where}.answer", "is not a string or a list of strings",
                                "give the gold answer as text or a list of aliases")
    aliases = [a for a in aliases if a.strip()]
    if not aliases:
        raise InvalidInputError(f"{where}.answer", "is empty", "give at least one gold alias")
    return tuple(aliases)


CHAIN_FIELDS = ("direct_answer", "rag_answer")
"""A labeled record's fields for its chain's two answers (both or neither)."""


def _chain_answers(record: dict[str, Any], where: str) -> ChainAnswers | None:
    """The chain's two answers of a record, when it gives them (both, as text)."""
    given = [name for name in CHAIN_FIELDS if name in record]
    if not given:
        return None
    fix = ("give both answers of your chain as text: direct_answer (the chain run without "
           "retrieval) and rag_answer (with it), or neither to let the model answer")
    if len(given) == 1:
        missing = next(name for name in CHAIN_FIELDS if name not in given)
        raise InvalidInputError(f"{where}.{missing}", f"is missing while {given[0]} is given",
                                fix)
    for name in CHAIN_FIELDS:
        if not isinstance(record[name], str):
            raise InvalidInputError(f"{where}.{name}", f"is a {type(record[name]).__name__}, "
                                    "not text", fix)
    return ChainAnswers(direct=record["direct_answer"], rag=record["rag_answer"])


def _passages(record: dict[str, Any], where: str, ident: str) -> tuple[Passage, ...] | None:
    raw = record.get("passages")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvalidInputError(f"{where}.passages", "is not a list",
                                "give passages as a list of strings or {title, text} objects")
    out = []
    for rank, item in enumerate(raw):
        if isinstance(item, str):
            title, text = "", item
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            title, text = str(item.get("title") or ""), item["text"]
        else:
            raise InvalidInputError(f"{where}.passages[{rank}]", "is not text",
                                    "give a string or a {title, text} object")
        if text.strip():
            out.append(Passage(id=f"{ident}#{rank}", title=title, text=text.strip(),
                               metadata={"rank": rank}))
    return tuple(out)


def _records(file: Path) -> list[tuple[str, Any]]:
    """``(where, record)`` of a JSON list file (``name[i]``) or a JSONL file (``name:LINE``,
    1-based; blank lines skipped), so that an error names the record it is about."""
    if strict_json.is_jsonl(file):
        return [(f"{file.name}:{number}",
                 strict_json.loads(line, f"{file.name}:{number}", "give one JSON object "
                                   "{question, answer, passages} per line"))
                for number, line in strict_json.lines(file, file.name)]
    data = strict_json.load_document(file, str(file), "give a JSON list of {test_id, "
                                     "question, answer} records (or a .jsonl file, one "
                                     "record per line)")
    if isinstance(data, dict):
        return _llama_index_records(data, file)
    if not isinstance(data, list):
        raise InvalidInputError(str(file), "is not a JSON list",
                                "give a JSON list of {test_id, question, answer} records")
    return [(f"{file.name}[{i}]", rec) for i, rec in enumerate(data)]


def _llama_index_records(data: dict[str, Any], file: Path) -> list[tuple[str, Any]]:
    """A LlamaIndex evaluation dataset saved with ``save_json``, as our records.

    ``LabelledRagDataset``: ``{"examples": [{query, reference_answer, reference_contexts}]}``;
    ``QueryResponseDataset``: ``{"queries": {id: query}, "responses": {id: answer}}``. The
    reference contexts are the text each question was written from, not what the user's
    retriever returns, so they are not taken as passages: measuring RAG on its own gold
    context would favour RAG. Retrieve with ``--corpus`` / ``--index`` instead.
    """
    if isinstance(data.get("examples"), list):
        out = []
        for i, example in enumerate(data["examples"]):
            where = f"{file.name}.examples[{i}]"
            if not isinstance(example, dict):
                raise InvalidInputError(where, "is not an object",
                                        "save the dataset with LabelledRagDataset.save_json")
            out.append((where, {"question": example.get("query"), "id": i,
                                "answer": example.get("reference_answer"),
                                **{k: example[k] for k in CHAIN_FIELDS if k in example}}))
        return out
    if isinstance(data.get("predictions"), list):
        raise InvalidInputError(f"{file.name}.predictions", "is a LlamaIndex prediction "
                                "dataset: one answer per question, not the two (without and "
                                "with retrieval) the check compares, and no gold answers",
                                "run `trustmargin check --chain MODULE:ENGINE LABELED` on "
                                "your query engine with the labeled dataset instead")
    queries, responses = data.get("queries"), data.get("responses")
    if isinstance(queries, dict) and isinstance(responses, dict):
        return [(f"{file.name}.queries[{key!r}]", {"id": key, "question": query,
                                                   "answer": responses.get(key)})
                for key, query in queries.items()]
    raise InvalidInputError(str(file), "is a JSON object, not a list of records nor a "
                            "LlamaIndex dataset ({examples} or {queries, responses})",
                            "give a JSON list of {question, answer} records")


# Where LangSmith examples usually keep the question and the reference answer.
LANGSMITH_QUESTION_KEYS = ("question", "input", "query")
LANGSMITH_ANSWER_KEYS = ("answer", "answers", "output", "reference", "expected")


def _langsmith_record(record: Any, where: str) -> Any:
    """A LangSmith example (``{"inputs": {...}, "outputs": {...}}``, as ``Example`` objects
    dump and dataset exports write them) as our record; any other record as it is. The
    chain's answers (``direct_answer``, ``rag_answer``) are read from the outputs or the
    inputs; any other output key beside the gold answer is refused, naming it."""
    if not isinstance(record, dict) or "question" in record or not isinstance(
            record.get("inputs"), dict):
        return record
    inputs, outputs = record["inputs"], record.get("outputs") or {}
    answer_key = next((k for k in LANGSMITH_ANSWER_KEYS if k in outputs), None)
    flat = {"id": record.get("id"),
            "question": next((inputs[k] for k in LANGSMITH_QUESTION_KEYS if k in inputs), None),
            "answer": outputs.get(answer_key) if answer_key else None,
            # The chain's own answers travel in the outputs (or inputs) of an exported run.
            **{k: v for part in (inputs, outputs) for k, v in part.items()
               if k in CHAIN_FIELDS}}
    unread = [k for k in outputs if k != answer_key and k not in CHAIN_FIELDS]
    if answer_key is not None and unread:
        # Never fitted on without them: an answer under a name we do not read would leave
        # the check on the scorer's own answers, saying nothing.
        raise InvalidInputError(f"{where}.outputs.{unread[0]}", "is not read: the gold "
                                f"answer is read from outputs.{answer_key} and your chain's "
                                "answers from direct_answer and rag_answer",
                                "rename your chain's two answers to direct_answer (run "
                                "without retrieval) and rag_answer (as deployed), or remove "
                                "the key")
    passages = next((inputs[k] for k in ("passages", "context", "contexts") if k in inputs),
                    None)
    if isinstance(passages, list):
        flat["passages"] = passages
    return {k: v for k, v in flat.items() if v is not None}


def load_examples(path: str | Path, dataset: str | None = None) -> list[EvalExample]:
    """Read one question file, in file order: a JSON list or a JSONL file (``.jsonl``) of
    ``{question, answer | answers[, passages][, test_id | id][, direct_answer, rag_answer]}``
    records (the last two: a user's chain's own answers, see :class:`ChainAnswers`),
    LangSmith examples (``{inputs: {question}, outputs: {answer}}``, also in a JSON list) or a
    LlamaIndex evaluation dataset's ``save_json`` file.

    Raises:
        InvalidInputError: the file is missing or not JSON / JSONL, or a record is bad; the
            field names the record (``file.json[3].answer``, ``file.jsonl:4.question``).
    """
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError("dataset", f"file {file} does not exist",
                                "pass the path of a JSON or JSONL question file or a named "
                                "dataset")
    name = dataset or file.stem
    out = []
    for i, (where, given) in enumerate(_records(file)):
        rec = _langsmith_record(given, where)
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
            raise InvalidInputError(f"{where}.question", "is missing or not a string",
                                    "give every record a 'question' string")
        if is_blank_text(rec["question"]):
            # Here, before any model loads: the arbiter refused it 29 s in, as inputs[2].
            raise InvalidInputError(f"{where}.question", "is empty or has no visible "
                                    "character", "write the question, or remove the record")
        ident = str(rec.get("test_id", rec.get("_id", rec.get("id", i))))
        meta = {"type": str(rec["type"])} if "type" in rec else {}
        out.append(EvalExample(dataset=name, id=ident, question=rec["question"].strip(),
                               answers=_gold(rec, where), passages=_passages(rec, where, ident),
                               meta=meta, chain=_chain_answers(rec, where)))
    return out


def _id_key(example: EvalExample) -> tuple[int, str]:
    return (int(example.id), "") if example.id.isdigit() else (1 << 62, example.id)


def load_named(name: str, data_dir: str | Path) -> list[EvalExample]:
    """Load a named dataset (see :data:`NAMED_DATASETS`) from ``data_dir``, sorted by id."""
    spec = NAMED_DATASETS.get(name)
    if spec is None:
        raise InvalidInputError("dataset", f"unknown dataset name {name!r}",
                                f"use one of {sorted(NAMED_DATASETS)} or a path to a JSON file")
    root = Path(data_dir)
    examples: list[EvalExample] = []
    for rel in spec.files:
        if not (root / rel).is_file():
            raise InvalidInputError("data_dir", f"{root / rel} does not exist",
                                    "point --data-dir (or TRUSTMARGIN_DATA) at the folder "
                                    "holding trustmargin/, prag/ and hipporag/, or download "
                                    "the files (see docs)")
        examples.extend(load_examples(root / rel, dataset=name))
    first: dict[str, EvalExample] = {}  # each id once, at its first example
    for example in sorted(examples, key=_id_key):
        first.setdefault(example.id, example)
    return list(first.values())


def load_dataset(name_or_path: str, data_dir: str | Path | None = None) -> list[EvalExample]:
    """A named dataset under ``data_dir``, or a question file given by path."""
    if name_or_path in NAMED_DATASETS:
        if data_dir is None:
            raise InvalidInputError("data_dir", "is required for a named dataset",
                                    "pass --data-dir (the folder with trustmargin/ and prag/)")
        return load_named(name_or_path, data_dir)
    return load_examples(name_or_path)


def corpus_path(name: str, data_dir: str | Path) -> Path | None:
    """The paragraph corpus that goes with a named dataset, when one exists."""
    spec = NAMED_DATASETS.get(name)
    return Path(data_dir) / spec.corpus if spec and spec.corpus else None


def passage_pool(examples: Sequence[EvalExample]) -> list[Passage]:
    """All distinct shipped passages of a dataset: a pool of real text for noise injection."""
    seen: set[str] = set()
    pool = []
    for ex in examples:
        for p in ex.passages or ():
            if p.text not in seen:
                seen.add(p.text)
                pool.append(p)
    return pool


# -- downloads (need internet; not exercised in the sandbox) -------------------------------

TRUSTMARGIN_COMMIT = "c32b1143e6a9a7e9eac7e885dd32da51b345702a"
PRAG_COMMIT = "ef0a6e9e38e2e7457ba4e400e3f3258ea5900773"
HIPPORAG_COMMIT = "c617143f01477243992a63b2e2151cc003dd3b21"
_RAW = "https://raw.githubusercontent.com"

DOWNLOADS: dict[str, str] = {
    "trustmargin/2wikimultihopqa_dev.json":
        f"{_RAW}/mojixu/TrustMargin/{TRUSTMARGIN_COMMIT}/data/2wikimultihopqa/dev.json",
    "trustmargin/complexwebquestions_dev.json":
        f"{_RAW}/mojixu/TrustMargin/{TRUSTMARGIN_COMMIT}/data/complexwebquestions/dev.json",
    "prag/complexwebquestions_total.json":
        f"{_RAW}/alpassss/PRAG/{PRAG_COMMIT}/data_aug/complexwebquestions/"
        "llama3.2-1b-instruct/total.json",
    "prag/2wikimultihopqa_compositional.json":
        f"{_RAW}/alpassss/PRAG/{PRAG_COMMIT}/data_aug/2wikimultihopqa/"
        "llama3.2-1b-instruct/compositional.json",
    "prag/2wikimultihopqa_comparison.json":
        f"{_RAW}/alpassss/PRAG/{PRAG_COMMIT}/data_aug/2wikimultihopqa/"
        "llama3.2-1b-instruct/comparison.json",
    "prag/hotpotqa_bridge.json":
        f"{_RAW}/alpassss/PRAG/{PRAG_COMMIT}/data_aug/hotpotqa/llama3.2-1b-instruct/bridge.json",
    "prag/hotpotqa_comparison.json":
        f"{_RAW}/alpassss/PRAG/{PRAG_COMMIT}/data_aug/hotpotqa/"
        "llama3.2-1b-instruct/comparison.json",
    "hipporag/2wikimultihopqa_corpus.json":
        f"{_RAW}/OSU-NLP-Group/HippoRAG/{HIPPORAG_COMMIT}/reproduce/dataset/"
        "2wikimultihopqa_corpus.json",
}

# The official releases, as linked from the datasets' own READMEs.
OFFICIAL_2WIKI_ZIP = "https://www.dropbox.com/s/ms2m13252h6xubs/data_ids_april7.zip?dl=1"
OFFICIAL_CWQ_FOLDER = "https://www.dropbox.com/sh/7pkwkrfnwqhsnpo/AACuu4v3YNkhirzBOeeaHYala?dl=1"


def _fetch(url: str, timeout: float = 120.0) -> bytes:
    import httpx

    response = httpx.get(url, follow_redirects=True, timeout=timeout)
    response.raise_for_status()
    return response.content


def _keep_fields(records: list[dict[str, Any]], test_type: str | None) -> list[dict[str, Any]]:
    """PRAG's augmented records hold more than evaluation needs; keep the shared fields."""
    out = []
    for i, rec in enumerate(records):
        kept = {"test_id": rec.get("test_id", i), "question": rec["question"],
                "answer": rec.get("answer", rec.get("answers"))}
        if "passages" in rec:
            kept["passages"] = rec["passages"]
        if test_type:
            kept["type"] = test_type
        out.append(kept)
    return out


def download_data_dir(dest: str | Path, *, overwrite: bool = False) -> Path:
    """Recreate the data directory used by the named datasets (GitHub raw files, pinned commits).

    Writes ``trustmargin/``, ``prag/`` and ``hipporag/`` under ``dest`` and returns it. Needs
    internet access; not run in the sandbox this package was developed in.
    """
    root = Path(dest)
    for rel, url in DOWNLOADS.items():
        target = root / rel
        if target.exists() and not overwrite:
            continue
        records = json.loads(_fetch(url))
        if rel.startswith("prag/"):
            records = _keep_fields(records, Path(url).stem)
        write_text_atomic(target, json.dumps(records, ensure_ascii=False))
    return root


def download_official_2wiki(dest: str | Path, limit: int | None = 1000) -> Path:
    """The official 2WikiMultihopQA dev set as ``{test_id, question, answer, type}`` JSON.

    ``test_id`` is the position in the official ``dev.json`` (the paper uses the first 1000).
    Needs internet access; not run in the sandbox.
    """
    archive = zipfile.ZipFile(io.BytesIO(_fetch(OFFICIAL_2WIKI_ZIP, timeout=600.0)))
    name = next(n for n in archive.namelist() if n.endswith("dev.json"))
    records = json.loads(archive.read(name))[:limit]
    out = [{"test_id": i, "question": r["question"], "answer": r["answer"], "type": r["type"]}
           for i, r in enumerate(records)]
    return write_text_atomic(dest, json.dumps(out, ensure_ascii=False))


def download_official_cwq(dest: str | Path, limit: int | None = 1000) -> Path:
    """The official ComplexWebQuestions dev set as ``{test_id, question, answer}`` JSON.

    Gold aliases are every answer's ``answer`` plus its ``aliases``. Needs internet access;
    not run in the sandbox.
    """
    archive = zipfile.ZipFile(io.BytesIO(_fetch(OFFICIAL_CWQ_FOLDER, timeout=600.0)))
    name = next(n for n in archive.namelist() if n.endswith("ComplexWebQuestions_dev.json"))
    records = json.loads(archive.read(name))[:limit]
    out = []
    for i, r in enumerate(records):
        aliases: list[str] = []
        for a in r.get("answers", []):
            aliases.extend([a.get("answer", ""), *a.get("aliases", [])])
        out.append({"test_id": i, "question": r["question"],
                    "answer": [a for a in dict.fromkeys(aliases) if a]})
    return write_text_atomic(dest, json.dumps(out, ensure_ascii=False))

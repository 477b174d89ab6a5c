"""The remote-only user's path, run as a script in an interpreter without torch/transformers.

``python tests/torch_free_flow.py URL MODEL`` scores on the OpenAI-compatible server at URL
(serving the embedded SmolLM2-135M as MODEL) the way a user of ``pip install
'trustmargin-integrations[remote,langchain,cli]'`` does (``cli``: the command and its BM25
index), and prints one JSON summary line:

1. torch and transformers cannot be imported here (a fresh venv lacks them; the main suite's
   run blocks them, see tests/test_torch_free.py);
2. ``trustmargin ask --remote-url`` and ``trustmargin score --remote-url`` (in this process,
   through the CLI's own entry point);
3. a LangChain RAG chain (BM25 retriever, prompt, the served model as its LLM) with
   ``with_trustmargin`` around it, scored by an ``OpenAICompatBackend`` arbiter;
4. asking for a local model instead is the typed error naming the ``local`` extra;
5. none of the above imported torch or transformers.

Run by tests/test_torch_free.py (both ways) and .ci/torch_free.sh (the fresh venv).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HEAVY = ("torch", "transformers")
QUESTION = "Who directed the film Alien?"
CORPUS = [
    {"title": "Alien", "text": "Alien is a 1979 film directed by Ridley Scott."},
    {"title": "Canberra", "text": "Canberra is the capital of Australia."},
]


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def cli(*args: str) -> tuple[int, str, str]:
    """``trustmargin ARGS`` through the CLI's entry point: exit code, stdout, stderr."""
    from trustmargin_integrations.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def remote_options(url: str, model: str) -> list[str]:
    return ["--remote-url", url, "--remote-model", model, "--model", "smollm2-135m",
            "--concurrency", "1"]


def run_ask(url: str, model: str, corpus: Path) -> dict[str, Any]:
    code, out, err = cli("ask", QUESTION, "--corpus", str(corpus), "--top-k", "1",
                         "--direct-answer", "Steven Spielberg", "--rag-answer", "Ridley Scott",
                         "--json", *remote_options(url, model))
    assert code == 0, (code, out, err)
    decision = json.loads(out)
    assert decision["m"] is not None and decision["passages"][0]["title"] == "Alien", decision
    return {key: decision[key] for key in ("source", "reason", "m")}


def run_score(url: str, model: str, folder: Path) -> dict[str, Any]:
    given = folder / "candidates.jsonl"
    given.write_text(json.dumps({
        "question": "What is the capital of Australia?", "passages": [CORPUS[1]],
        "direct_answer": "Sydney", "rag_answer": "Canberra", "gold": "Canberra"}) + "\n",
        encoding="utf-8")
    output = folder / "decisions.jsonl"
    code, out, err = cli("score", "-i", str(given), "-o", str(output),
                         *remote_options(url, model))
    assert code == 0, (code, out, err)
    [decision] = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert decision["m"] is not None and decision["metadata"] == {"gold": "Canberra"}, decision
    return {key: decision[key] for key in ("source", "reason", "m")}


def run_chain(url: str, model: str, corpus: Path) -> dict[str, Any]:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough

    from trustmargin_integrations import TrustMargin
    from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend
    from trustmargin_integrations.langchain import TrustMarginRetriever, with_trustmargin
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    backend = OpenAICompatBackend(url, model, tokenizer="smollm2-135m", max_concurrency=1)
    # The chain's LLM is the served model too: greedy text from the same server.
    served = RunnableLambda(
        lambda prompt: backend.generate([backend.render_prompt(prompt.to_string())], 12)[0],
        name="served_llm")
    prompt = PromptTemplate.from_template(
        "Context: {context}\nQuestion: {question}\nAnswer in a few words:")
    retriever = TrustMarginRetriever(BM25Index.from_corpus(corpus), k=1)
    chain = ({"context": retriever | (lambda docs: " ".join(d.page_content for d in docs)),
              "question": RunnablePassthrough()} | prompt | served | StrOutputParser())
    with backend:
        decision = with_trustmargin(chain, TrustMargin(backend), output="decision").invoke(
            QUESTION)
    assert decision.m is not None and decision.answer in (decision.direct_raw,
                                                          decision.rag_raw), decision
    return {"source": decision.source, "reason": decision.reason, "m": decision.m}


def local_model_refused(corpus: Path) -> str:
    from trustmargin_integrations import TrustMargin
    from trustmargin_integrations.errors import MissingExtraError

    code, _, err = cli("ask", QUESTION, "--corpus", str(corpus), "--direct-answer", "a",
                       "--rag-answer", "b")
    assert code != 0 and "trustmargin-integrations[local]" in err, (code, err)
    try:
        TrustMargin.from_pretrained("smollm2-135m")
    except MissingExtraError as exc:
        assert exc.extra == "local", exc
        return str(exc)
    raise AssertionError("from_pretrained loaded a local model without the local extra")


def main(url: str, model: str) -> dict[str, Any]:
    assert not any(importable(m) for m in HEAVY), "torch or transformers is importable"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = folder / "corpus.json"
        corpus.write_text(json.dumps(CORPUS), encoding="utf-8")
        summary = {"ask": run_ask(url, model, corpus), "score": run_score(url, model, folder),
                   "chain": run_chain(url, model, corpus),
                   "local_refused": local_model_refused(corpus)}
    summary["heavy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    assert not summary["heavy_loaded"], summary["heavy_loaded"]
    return summary


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))

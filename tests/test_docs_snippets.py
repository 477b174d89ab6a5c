"""Every ```python snippet in the integration docs and the README runs, top to bottom, as a
reader would."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.arbiter import core
from trustmargin_integrations.backends.spec import BackendSpec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# A block the tests cannot run here (it needs a server) is marked in the page, right above its
# fence, and is only compiled.
NOT_RUN = "<!-- not run by the tests:"
NOT_RUN_FENCE = re.compile(r"^" + re.escape(NOT_RUN) + r"[^\n]*-->\n```python\n(.*?)^```",
                           re.DOTALL | re.MULTILINE)
# What each page's snippets must print (a wrong answer would still print; these lines prove
# the snippets reached the model and the error paths they describe).
EXPECTED = {
    "langchain.md": ["rag_answer", "rag_answer: is missing", "['history', 'question']",
                     "AIMessage ", "kept one side's answer: True", "margins: ", "kept: ",
                     "name='Tomas Rilke' age=41 role='engineer'",
                     "tool_calls: get_weather {'city': 'Paris'}"],
    "llamaindex.md": ["rag.source_nodes", "velmora"],
}


def snippets(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    skipped = set(NOT_RUN_FENCE.findall(text))
    return [block for block in FENCE.findall(text) if block not in skipped]


def run_blocks(path: Path, backend: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the page's blocks in one namespace; return what they printed."""

    def load_backend(model: Any = "smollm2-135m", field: str = "model", **kwargs: Any) -> Any:
        # The snippets load the embedded model; the session already holds that same model,
        # so it is reused instead of loaded again. Everything else in from_pretrained (the
        # shipped policy of the default, calibration=None for the paper's rule) runs for real.
        assert BackendSpec.coerce(model, field) == BackendSpec("hf", "smollm2-135m")
        assert not kwargs
        return backend

    monkeypatch.setattr(core, "load_backend", load_backend)
    blocks = snippets(path)
    # A module of its own, as a reader's script would be: typing (a LangGraph state's
    # TypedDict annotations) resolves names through sys.modules[cls.__module__].
    module = types.ModuleType(f"docs_{path.name.replace('.', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    out = io.StringIO()
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{path.name} snippet {number}", "exec")
        with contextlib.redirect_stdout(out):
            exec(code, namespace)  # running the docs as a reader would is the point
    return out.getvalue()


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_doc_snippets_run(page: str, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(snippets(DOCS / page)) >= 4
    printed = run_blocks(DOCS / page, backend, monkeypatch)
    for expected in EXPECTED[page]:
        assert expected in printed, f"{page}: {expected!r} not printed:\n{printed}"


def test_readme_python_blocks_run(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    not_run = NOT_RUN_FENCE.findall(text)
    # The blocks that need a server still have to be valid Python.
    for block in not_run:
        compile(block, "README.md (not run)", "exec")
    assert len(snippets(readme)) >= 1
    printed = run_blocks(readme, backend, monkeypatch)
    # The Python API block's four parts all reached the model.
    assert "Zelvora" in printed and printed.count("\n") >= 4, printed

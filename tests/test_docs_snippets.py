"""Every ```python snippet in the integration docs runs, top to bottom, as a reader would."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# What each page's snippets must print (a wrong answer would still print; these lines prove
# the snippets reached the model and the error paths they describe).
EXPECTED = {
    "langchain.md": ["rag_answer", "rag_answer: is missing"],
    "llamaindex.md": ["rag.source_nodes", "velmora"],
}


def snippets(page: str) -> list[str]:
    return FENCE.findall((DOCS / page).read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_doc_snippets_run(page: str, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def from_pretrained(cls: type[TrustMargin], model: str = "smollm2-135m", *,
                        config: TrustMarginConfig | None = None, **kwargs: Any) -> TrustMargin:
        # The snippets load the embedded model; the session already holds that same model,
        # so it is reused instead of loaded again (the object is the real one).
        assert model == "smollm2-135m" and not kwargs
        return cls(backend, config)

    monkeypatch.setattr(TrustMargin, "from_pretrained", classmethod(from_pretrained))
    blocks = snippets(page)
    assert len(blocks) >= 4
    namespace: dict[str, Any] = {"__name__": f"docs_{page.replace('.', '_')}"}
    out = io.StringIO()
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{page} snippet {number}", "exec")
        with contextlib.redirect_stdout(out):
            exec(code, namespace)  # running the docs as a reader would is the point
    printed = out.getvalue()
    for expected in EXPECTED[page]:
        assert expected in printed, f"{page}: {expected!r} not printed:\n{printed}"

"""The example notebooks run top to bottom in a real Jupyter kernel without a cell error."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from notebook_support import execute_notebook

pytestmark = [pytest.mark.slow, pytest.mark.notebook]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = ["langchain_rag_chain.ipynb", "llamaindex_query_engine.ipynb", "plug_and_play.ipynb"]
# Notebook-specific lines that must be printed as well as the summary table.
PRINTED = {
    # The IRCoT audit record, the LangChain chain agreeing with the table, and the FLARE
    # wrapping's record of what FLARE did.
    "plug_and_play.ipynb": ['"pipeline": "ircot"', "same decision as the table: True",
                            '"engine": "FLAREInstructQueryEngine"'],
}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_without_a_cell_error(name: str) -> None:
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert code_cells, "a notebook with no code proves nothing"
    # Committed with outputs: every code cell ran when the notebook was saved.
    assert all(c.execution_count is not None for c in code_cells)
    execute_notebook(nb, EXAMPLES)  # raises CellExecutionError on the first failing cell
    errors = [o for c in code_cells for o in c.outputs if o.output_type == "error"]
    assert errors == []
    text = "".join(o.get("text", "") for c in code_cells for o in c.outputs
                   if o.output_type == "stream")
    assert "TrustMargin" in text and "correct" in text  # the summary table was printed
    for expected in PRINTED.get(name, []):
        assert expected in text, f"{name} did not print {expected!r}"

"""The example notebooks run top to bottom in a real Jupyter kernel without a cell error."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = ["langchain_rag_chain.ipynb", "llamaindex_query_engine.ipynb", "plug_and_play.ipynb"]
# Notebook-specific lines that must be printed as well as the summary table.
PRINTED = {
    # The IRCoT audit record, the LangChain chain agreeing with the table, and the FLARE
    # wrapping's record of what FLARE did.
    "plug_and_play.ipynb": ['"pipeline": "ircot"', "same decision as the table: True",
                            '"engine": "FLAREInstructQueryEngine"'],
}
KERNEL_NAME = "trustmargin-test-python"


def execute_notebook(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 600) -> None:
    """Run every cell of ``nb`` in place (outputs are written into it).

    The kernel is an ipykernel on *this* interpreter (``sys.executable``), declared in a
    throw-away kernelspec, so a fresh CI machine needs no ``ipykernel install`` and the
    notebook can never pick up another Python that lacks this package.
    """
    with tempfile.TemporaryDirectory() as specs:
        spec_dir = Path(specs) / KERNEL_NAME
        spec_dir.mkdir()
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "TrustMargin test kernel",
            "language": "python",
        }), encoding="utf-8")
        manager = KernelManager(kernel_name=KERNEL_NAME,
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[specs]))
        client = NotebookClient(nb, km=manager, timeout=timeout, allow_errors=False,
                                resources={"metadata": {"path": str(cwd)}})
        try:
            client.execute()
        finally:
            # A client given its kernel manager does not own it and leaves the kernel
            # running (about 1.2 GB each with the model loaded): stop it here.
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)


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

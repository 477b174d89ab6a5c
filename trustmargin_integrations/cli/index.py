"""``trustmargin index``: build the embedded BM25 index, or fill an Elasticsearch index."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command, console
from trustmargin_integrations.cli.boundary import shown_markup
from trustmargin_integrations.cli.options import EsIndexOpt, EsUrlOpt
from trustmargin_integrations.errors import InvalidInputError


@command(name="index")
def index_cmd(
    corpus: Annotated[Path, typer.Option(
        help="JSON/JSONL corpus of {title, text} (or DPR psgs_w100.tsv with --elasticsearch).")],
    out: Annotated[Path | None, typer.Option(help="Directory to write the BM25 index to.")
                   ] = None,
    elasticsearch: EsUrlOpt = None,
    es_index: EsIndexOpt = "trustmargin",
    recreate: Annotated[bool, typer.Option(help="Drop and recreate the ES index first.")
                        ] = False,
) -> None:
    """Build the embedded BM25 index (--out DIR) or index into Elasticsearch (--elasticsearch)."""
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    if (out is None) == (elasticsearch is None):
        raise InvalidInputError("--out/--elasticsearch", "exactly one must be given",
                                "pass --out DIR for the embedded index or --elasticsearch URL")
    if elasticsearch:
        from trustmargin_integrations.retrieval.elasticsearch import index_command

        report = index_command(corpus, elasticsearch, index=es_index, recreate=recreate)
        console.print(f"indexed {report.indexed} passages into {shown_markup(report.index)} "
                      f"({report.failed} failed) in {report.seconds:.1f} s")
        return
    assert out is not None
    # Checked before the corpus is read and indexed, which can take minutes.
    if out.exists() and not out.is_dir():
        raise InvalidInputError("--out", f"{out} is a file, not a directory",
                                "pass a new or existing directory for the index")
    from trustmargin_integrations.output_guard import guard_output

    for path in BM25Index.files(out):
        guard_output(path, "--out", inputs={"--corpus": corpus})
    built = BM25Index.from_corpus(corpus, show_progress=True)
    built.save(out)
    console.print(f"indexed {len(built)} passages into {shown_markup(str(out))}")

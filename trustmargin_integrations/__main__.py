"""``python -m trustmargin_integrations`` and the ``trustmargin`` console script run the CLI.

The entry point lives outside :mod:`.cli` so that it can start on any install: without the
``cli`` extra (typer) it prints the one-line error naming the extra, not a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trustmargin_integrations.errors import MissingExtraError

EXIT_MISSING_EXTRA = 2
"""The exit code of a command line that cannot start (as the CLI's for any typed error)."""


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``trustmargin`` command line on ``argv`` (default: the process's own).

    On an install without the ``cli`` extra, print ``error <message naming the extra>`` to
    stderr and exit with code 2.
    """
    try:
        from trustmargin_integrations.cli import main as run
    except MissingExtraError as exc:
        print(f"error {exc}", file=sys.stderr)
        sys.exit(EXIT_MISSING_EXTRA)
    run(argv)


if __name__ == "__main__":
    main()

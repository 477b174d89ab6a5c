"""The ``trustmargin`` command line: one module per sub-command.

:mod:`.app` holds the typer app and :func:`main`; :mod:`.boundary` the one error boundary
every command runs in; :mod:`.options` and :mod:`.common` what several commands share. The
command line is the top layer: it may import anything, and nothing imports it.

It needs the ``cli`` extra (typer). Without it, importing this package is a
:class:`~trustmargin_integrations.errors.MissingExtraError` naming the extra; the console
script (:func:`trustmargin_integrations.__main__.main`) prints that error as one line.
"""

import importlib

from trustmargin_integrations.extras import CLI, require

# Before typer's import (in .app): an install without the extra gets the typed error.
require("cli", CLI, "The trustmargin command line")

from trustmargin_integrations.cli.app import app, main  # noqa: E402

# Importing a command's module registers it; this order is the order `--help` lists them.
COMMAND_MODULES = ("demo", "ask", "score", "index", "models", "evaluate", "report", "calibrate",
                   "check")
for _module in COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["app", "main"]

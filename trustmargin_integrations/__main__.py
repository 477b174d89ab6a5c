"""``python -m trustmargin_integrations`` runs the CLI."""

from trustmargin_integrations.cli import main

main()

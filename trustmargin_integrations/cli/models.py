"""``trustmargin models``: the named models this package can load offline."""

from __future__ import annotations

from trustmargin_integrations.cli.app import command, console


@command()
def models() -> None:
    """List the named models this package can load offline."""
    from trustmargin_integrations.model_store import REGISTRY

    for spec in REGISTRY.values():
        console.print(f"[bold]{spec.name}[/]  {spec.description}\n    install: {spec.install_hint}")

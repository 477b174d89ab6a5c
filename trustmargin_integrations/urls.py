"""URL redaction and log scrubbing: the one place that decides what of a URL may be shown.

Credentials travel in URLs (``http://user:secret@host``), in API keys and in the servers'
own error texts. Everything this package prints, raises or logs about a server goes through
:func:`redact_url` or :func:`scrub`, and :func:`protect_logs` adds a filter to the loggers of
the HTTP clients we drive (httpx, httpcore, elastic-transport) and to our own, so a record
they emit at any level carries no secret either.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

_USERINFO = re.compile(r"(?<=//)[^/@\s]*@")
_LOGGERS = (
    "httpx", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore.http2",
    "httpcore.proxy", "elastic_transport", "elastic_transport.transport",
    "elastic_transport.node_pool", "elasticsearch", "urllib3.connectionpool",
    "trustmargin_integrations", "trustmargin_integrations.backends.openai_compat",
    "trustmargin_integrations.retrieval.elasticsearch",
)
_secrets: set[str] = set()
_installed = False
_guard = threading.Lock()


def redact_url(url: str) -> str:
    """``url`` without any ``user:password@`` part and without a query string.

    A URL without a scheme (``user:secret@host:9200``) or with a malformed port is still
    redacted: everything up to the last ``@`` of the authority goes.
    """
    text = str(url).strip()
    if "://" not in text:
        text = "//" + text  # urlsplit finds an authority only after "//"
    parts = urlsplit(text)
    host = parts.netloc.rsplit("@", 1)[-1]
    redacted = urlunsplit((parts.scheme, host, parts.path, "", ""))
    return redacted.removeprefix("//")


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and that user and password (decoded)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    protect_logs([password] if password else [])
    clean = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return clean, (unquote(user), unquote(password))


def scrub(text: str) -> str:
    """``text`` with URL credentials and every registered secret replaced."""
    out = _USERINFO.sub("", text)
    for secret in _secrets:
        out = out.replace(secret, "***")
    return out


class _ScrubFilter(logging.Filter):
    """Rewrites each record's message with :func:`scrub` (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True


def protect_logs(secrets: Iterable[str] = ()) -> None:
    """Register secrets to scrub and install the filter on the HTTP clients' loggers (once)."""
    global _installed
    with _guard:
        _secrets.update(s for s in secrets if s and len(s) >= 3)
        if _installed:
            return
        scrubber = _ScrubFilter()
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(scrubber)
        _installed = True

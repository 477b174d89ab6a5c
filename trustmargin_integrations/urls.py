"""URL redaction: the one place that decides what of a URL may be printed or logged."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


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

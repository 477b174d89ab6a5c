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
from base64 import b64encode
from collections.abc import Iterable
from urllib.parse import quote, unquote

from trustmargin_integrations.errors import InvalidInputError

# "//" up to the last "@" of the same token: also a password holding an unencoded "/" or "@".
# Up to the last "@" before a space: a password may hold quotes and "@" (the test's generated
# passwords do), and hiding too much of a message is safe where a prefix of a password is not.
_USERINFO = re.compile(r"(?<=//)[^\s<>]*@")
# The value of an Authorization header a server echoes back (``Authorization: Basic ...``,
# ``"authorization": "Bearer ..."``), whoever's credentials it holds.
_AUTH_VALUE = re.compile(r"(authorization\W{1,4}(?:basic|bearer|apikey)\s+)[^\s\"',;]+",
                         re.IGNORECASE)
# A logger's filter sees only records logged on that logger, not its children's: every logger
# that emits is named.
_LOGGERS = (
    "httpx", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore.http2",
    "httpcore.proxy", "httpcore.socks", "elastic_transport", "elastic_transport.transport",
    # elastic_transport.node logs whole request and response bodies at DEBUG.
    "elastic_transport.node", "elastic_transport.node_pool", "elasticsearch",
    "elasticsearch.helpers", "urllib3.connectionpool",
    "trustmargin_integrations", "trustmargin_integrations.backends.openai_compat",
    "trustmargin_integrations.retrieval.elasticsearch",
)
_secrets: set[str] = set()
_installed = False
_guard = threading.Lock()


# A URL's scheme as RFC 3986 spells it; "://" elsewhere (inside a password) starts nothing.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def _parts(url: str) -> tuple[str, str | None, str]:
    """(``scheme://`` or "", the user-info or None, the rest after the user-info's ``@``).

    Credentials are found before anything splits on ``?`` or ``#``: the user-info ends at
    the LAST ``@`` of the text. Users type passwords with unencoded ``/``, ``@``, ``#`` and
    ``?`` (``http://admin:s3cr#et@host``), which RFC 3986 forbids; splitting on ``#`` first
    printed ``http://admin:s3cr`` and read ``admin:1234#5@host`` as host ``admin``, port
    1234. The price: an ``@`` after the host (in a path, query or a served model's name
    after ``#``) is read as the end of credentials, so everything before it is hidden and
    never shown; server URLs and model names have no ``@``.
    """
    text = str(url).strip()
    scheme = _SCHEME.match(text)
    prefix = scheme.group() if scheme else ""
    rest = text[len(prefix):]  # no scheme: "user:secret@host:9200"
    at = rest.rfind("@")
    if at < 0:
        return prefix, None, rest
    return prefix, rest[:at], rest[at + 1:]


def _split(url: str) -> tuple[str, str | None]:
    """``url`` without its user-info, and that user-info (None when there is none)."""
    prefix, userinfo, rest = _parts(url)
    return prefix + rest, userinfo


def redact_url(url: str) -> str:
    """``url`` without any ``user:password@`` part and without a query string or fragment.

    A URL without a scheme (``user:secret@host:9200``), with a malformed port or with an
    unencoded ``/``, ``@``, ``#`` or ``?`` in its password is still redacted: everything up
    to the last ``@`` of the URL goes.
    """
    clean, _ = _split(url)
    return re.split(r"[?#]", clean, maxsplit=1)[0]


def split_fragment(url: str) -> tuple[str, str]:
    """``url`` (credentials kept) up to its first ``#`` after the credentials, and the text
    after that ``#`` ("" when there is none): a ``#`` inside a password is not a fragment."""
    prefix, userinfo, rest = _parts(url)
    base, _, fragment = rest.partition("#")
    return prefix + ("" if userinfo is None else userinfo + "@") + base, fragment


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and that user and password (decoded).

    The password is registered for scrubbing in every form a message could carry it: as
    typed, percent-decoded, percent-encoded, and inside the ``Authorization: Basic`` value
    (base64 of ``user:password``) that a server may echo back.
    """
    clean, userinfo = _split(url)
    if userinfo is None:
        return clean, None
    user, _, password = userinfo.partition(":")
    plain_user, plain_password = unquote(user), unquote(password)
    protect_logs([password])
    protect_basic_auth(plain_user, plain_password)
    return clean, (plain_user, plain_password)


def protect_basic_auth(user: str, password: str) -> None:
    """Register a basic-auth password for scrubbing in every form a message could carry it:
    as given, percent-encoded, and inside the ``Authorization: Basic`` value (base64 of
    ``user:password``, as httpx and the Elasticsearch client send it) a server may echo."""
    if not password:
        return
    basic = b64encode(f"{user}:{password}".encode()).decode("ascii")
    protect_logs([password, quote(password, safe=""), basic, basic.rstrip("=")])


def check_header_secret(value: str, field: str) -> str:
    """``value`` (an API key, a basic-auth user or password) when an HTTP header can carry
    it: printable ASCII, as the clients encode headers. Anything else would fail inside the
    client (``UnicodeEncodeError``) or split the header; the error names ``field`` (the
    argument or the variable it came from) and never shows the value."""
    if not isinstance(value, str):
        raise InvalidInputError(field, f"must be a string, got {type(value).__name__}",
                                "give the credential as text")
    for place, char in enumerate(value, 1):
        if not " " <= char <= "~":
            kind = "a control character" if char.isascii() else "a non-ASCII character"
            raise InvalidInputError(field, f"holds {kind} at character {place} (the value "
                                    "is not shown), which an HTTP header cannot carry",
                                    "give the credential exactly as the server issued it: "
                                    "keys and basic-auth credentials are printable ASCII; "
                                    "re-type one that was pasted with a stray character")
    return value


def scrub(text: str) -> str:
    """``text`` with URL credentials and every registered secret replaced."""
    out = _AUTH_VALUE.sub(r"\1***", _USERINFO.sub("", text))
    # Longest first: a secret that contains another must go whole, not leave a remainder.
    for secret in sorted(_secrets, key=len, reverse=True):
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

"""A password in a URL is never printed, whatever reserved character it holds: credentials are
found before anything splits the URL on ``#`` or ``?``, and every message shows the URL
redacted. Before, ``openai:http://admin:s3cr#et@127.0.0.1:1/v1#m`` printed
``'http://admin:s3cr'`` and ``admin:1234#5@host`` was read as host ``admin``, port 1234.

The command-line cases run the real command against 127.0.0.1 port 1 (nothing listens there:
the connection is refused at once), with the real SmolLM2 tokenizer.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest
from cli_support import DEMO, run_main
from hypothesis import given, settings
from hypothesis import strategies as st

from trustmargin_integrations.backends.openai_compat.settings import check_server_url
from trustmargin_integrations.backends.spec import BackendSpec
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchSettings
from trustmargin_integrations.urls import redact_url, scrub, split_credentials

# Every character RFC 3986 reserves or uses to delimit, and the percent sign.
RESERVED = ":/?#[]@!$&'()*+,;=%"
MARK = "Kq7"  # a piece of the password no URL, host or message otherwise holds

# The seven forms the issue measured: the password and the host each URL must give.
CASES = [
    ("http://admin:s3cr#et@127.0.0.1:1/v1", "s3cr#et"),
    ("http://admin:pa?ss@127.0.0.1:1", "pa?ss"),
    ("http://admin:1234#5@127.0.0.1:1/v1", "1234#5"),
    ("http://admin:a#b?c@127.0.0.1:1", "a#b?c"),
    ("http://admin:x?y#z@127.0.0.1:1/v1", "x?y#z"),
    ("admin:q#r@127.0.0.1:1", "q#r"),
    ("http://admin:p/@#?w@127.0.0.1:1/v1", "p/@#?w"),
]


@pytest.mark.parametrize(("url", "password"), CASES)
def test_credentials_come_out_before_any_split(url: str, password: str) -> None:
    clean, credentials = split_credentials(url)
    # A "%" followed by two hex digits is a percent-encoding in a URL: read as one.
    assert credentials == ("admin", unquote(password))
    assert "admin" not in redact_url(url) and password not in redact_url(url)
    parts = urlsplit(clean if "://" in clean else "http://" + clean)
    assert (parts.hostname, parts.port) == ("127.0.0.1", 1)
    if "://" not in url:
        return  # a server spec needs the scheme (Elasticsearch takes this form)
    spec = BackendSpec.parse(f"openai:{url}#m")
    assert spec.model == "m" and spec.url is not None
    assert split_credentials(spec.url)[1] == ("admin", password)
    assert "admin" not in str(spec) and password not in str(spec)


@pytest.mark.parametrize(("url", "password"), CASES[:3])
def test_the_commands_never_print_a_prefix_of_the_password(url: str, password: str,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_RETRIES", "0")
    head = password.split("#")[0].split("?")[0]
    common = ["ask", "Who built it?", "--corpus", str(DEMO / "corpus.json"),
              "--direct-answer", "a", "--rag-answer", "b"]
    for options in (["--backend", f"openai:{url}#smollm2-135m"],
                    ["--remote-url", url, "--model", "smollm2-135m"]):
        run = run_main(*common, *options)
        assert run.exit_code == 2, run.output
        # The request went to the host the URL names (not to "admin"), and no part of the
        # password shows.
        assert "127.0.0.1:1" in run.output, run.output
        assert head not in run.output and "admin" not in run.output, run.output


passwords = st.lists(st.sampled_from([*RESERVED, MARK, "a"]), min_size=1, max_size=14).map(
    "".join).map(lambda text: text + MARK)


@settings(max_examples=300, deadline=None)
@given(password=passwords, port=st.sampled_from(["1", "x"]), path=st.sampled_from(["", "/v1"]))
def test_no_password_with_reserved_characters_is_ever_shown(password: str, port: str,
                                                            path: str) -> None:
    url = f"http://admin:{password}@127.0.0.1:{port}{path}"
    clean, credentials = split_credentials(url)
    # A "%" followed by two hex digits is a percent-encoding in a URL: read as one.
    assert credentials == ("admin", unquote(password))
    shown = [redact_url(url), scrub(url), clean]
    try:
        check_server_url(url, "--remote-url")
        spec = BackendSpec.parse(f"openai:{url}#m")
        shown.append(str(spec))
        assert split_credentials(spec.url or "")[1] == ("admin", unquote(password))
        assert urlsplit(split_credentials(spec.url or "")[0]).hostname == "127.0.0.1"
    except InvalidInputError as exc:
        assert port == "x", exc
        shown.append(str(exc))
    try:
        shown.append(repr(ElasticsearchSettings(url=url)))
    except InvalidInputError as exc:
        shown.append(str(exc))
    for text in shown:
        assert MARK not in text, text


"""Environment variables are read by pydantic-settings models, one per group, and a malformed
one is an InvalidInputError naming the variable (trustmargin_integrations/environment.py).

Real process environment (monkeypatched per test), no fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trustmargin_integrations.backends import openai_compat
from trustmargin_integrations.backends.openai_compat import RemoteVariables
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.retrieval import elasticsearch as es
from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchVariables
from trustmargin_integrations.waits import Waits

SECRET = "s3cr3t-Value-42"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    for name in list(os.environ):
        if name.upper().startswith(("TRUSTMARGIN_ES_", "TRUSTMARGIN_REMOTE_")):
            monkeypatch.delenv(name)


def test_the_documented_variable_names_are_the_models_fields() -> None:
    documented = {es.ENV_URL: "url", es.ENV_API_KEY: "api_key", es.ENV_USER: "user",
                  es.ENV_PASSWORD: "password", es.ENV_CA_CERT: "ca_cert", es.ENV_INDEX: "index"}
    assert {f"{es.ENV_PREFIX}_{f.upper()}": f for f in ElasticsearchVariables.model_fields
            } == documented
    remote = {openai_compat.ENV_URL: "url", openai_compat.ENV_MODEL: "model",
              openai_compat.ENV_API_KEY: "api_key"}
    assert {f"{openai_compat.ENV_PREFIX}_{f.upper()}": f for f in RemoteVariables.model_fields
            } == remote


def test_variables_are_read_and_secrets_stay_out_of_repr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTMARGIN_ES_URL", "http://es.example:9200")
    monkeypatch.setenv("TRUSTMARGIN_ES_USER", "elastic")
    monkeypatch.setenv("TRUSTMARGIN_ES_PASSWORD", SECRET)
    monkeypatch.setenv("TRUSTMARGIN_ES_INDEX", "films")
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_API_KEY", SECRET)
    variables = ElasticsearchVariables.read()
    assert (variables.url, variables.user, variables.index) == (
        "http://es.example:9200", "elastic", "films")
    assert variables.password is not None and variables.password.get_secret_value() == SECRET
    remote = RemoteVariables.read()
    assert remote.api_key is not None and remote.api_key.get_secret_value() == SECRET
    for shown in (repr(variables), str(variables), repr(remote), str(remote)):
        assert SECRET not in shown
    settings = es.ElasticsearchSettings.from_env()
    assert (settings.username, settings.password) == ("elastic", SECRET)


def test_an_empty_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_TIMEOUT", "")
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_RETRIES", "5")
    monkeypatch.setenv("TRUSTMARGIN_ES_URL", "")
    waits = Waits.resolve("TRUSTMARGIN_REMOTE")
    assert (waits.timeout_s, waits.max_retries) == (120.0, 5)
    assert ElasticsearchVariables.read().url is None
    with pytest.raises(InvalidInputError, match="TRUSTMARGIN_ES_URL") as err:
        es.ElasticsearchSettings.from_env()
    assert err.value.field == "url"


@pytest.mark.parametrize(("name", "value", "words"), [
    ("TRUSTMARGIN_ES_TIMEOUT", "soon", "not a number"),
    ("TRUSTMARGIN_ES_RETRIES", "2.5", "not a whole number"),
    ("TRUSTMARGIN_REMOTE_READ_TIMEOUT", "0", "must be > 0"),
    ("TRUSTMARGIN_REMOTE_CONNECT_TIMEOUT", "nan", "must be > 0"),
])
def test_a_malformed_variable_is_named_with_its_value(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, words: str) -> None:
    monkeypatch.setenv(name, value)
    prefix = name.split("_")[1]
    with pytest.raises(InvalidInputError) as err:
        Waits.resolve(f"TRUSTMARGIN_{prefix}")
    assert err.value.field == name
    assert words in str(err.value)
    if not words.startswith("not a"):
        return
    # A variable that does not parse is reported even when an argument overrides it, rather
    # than silently ignored (the argument wins over a well-formed variable).
    with pytest.raises(InvalidInputError):
        Waits.resolve(f"TRUSTMARGIN_{prefix}", {"timeout_s": 5.0, "max_retries": 1,
                                                 "read_timeout_s": 5.0,
                                                 "connect_timeout_s": 5.0})


# -- a value the environment gave is named by its variable ------------------------------

def _remote() -> object:
    # The tokenizer is never loaded: the settings are checked first.
    return openai_compat.OpenAICompatBackend.from_env("smollm2-135m")


def _es_settings() -> object:
    return es.ElasticsearchSettings.from_env()


def _es_connect() -> object:
    # The real client is built; no request is sent.
    return es.ElasticsearchRetriever.connect()


def _cache() -> object:
    from trustmargin_integrations.model_store import cache_root
    return cache_root()


ES = {"TRUSTMARGIN_ES_URL": "http://es.example:9200"}


@pytest.mark.parametrize(("variables", "build", "named", "words"), [
    ({"TRUSTMARGIN_REMOTE_URL": "ftp://h", "TRUSTMARGIN_REMOTE_MODEL": "m"}, _remote,
     "TRUSTMARGIN_REMOTE_URL", "not an http(s) URL"),
    ({"TRUSTMARGIN_REMOTE_URL": "http://h:port", "TRUSTMARGIN_REMOTE_MODEL": "m"}, _remote,
     "TRUSTMARGIN_REMOTE_URL", "port that is not a number"),
    ({"TRUSTMARGIN_REMOTE_URL": "http://h:1", "TRUSTMARGIN_REMOTE_MODEL": "  "}, _remote,
     "TRUSTMARGIN_REMOTE_MODEL", "is empty"),
    ({"TRUSTMARGIN_ES_URL": "localhost:9200"}, _es_settings,
     "TRUSTMARGIN_ES_URL", "not an http(s) URL"),
    ({**ES, "TRUSTMARGIN_ES_CA_CERT": "/nonexistent/ca.pem"}, _es_settings,
     "TRUSTMARGIN_ES_CA_CERT", "does not exist"),
    ({**ES, "TRUSTMARGIN_ES_CA_CERT": "/"}, _es_settings,
     "TRUSTMARGIN_ES_CA_CERT", "is not a file"),
    ({**ES, "TRUSTMARGIN_ES_USER": "elastic"}, _es_settings,
     "TRUSTMARGIN_ES_PASSWORD", "missing for basic auth"),
    ({**ES, "TRUSTMARGIN_ES_USER": "elastic", "TRUSTMARGIN_ES_PASSWORD": SECRET,
      "TRUSTMARGIN_ES_API_KEY": "key"}, _es_settings,
     "TRUSTMARGIN_ES_API_KEY", "together with basic auth"),
    ({"TRUSTMARGIN_ES_URL": "http://elastic:pw@es.example:9200",
      "TRUSTMARGIN_ES_API_KEY": "key"}, _es_settings,
     "TRUSTMARGIN_ES_URL", "holds credentials"),
    ({**ES, "TRUSTMARGIN_ES_INDEX": "My Index"}, _es_connect,
     "TRUSTMARGIN_ES_INDEX", "not a valid index name"),
    ({"TRUSTMARGIN_CACHE": "/dev/null"}, _cache, "TRUSTMARGIN_CACHE", "is not a folder"),
])
def test_a_bad_value_from_the_environment_names_the_variable(
        monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], build: object,
        named: str, words: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInputError) as err:
        build()  # type: ignore[operator]
    assert err.value.field == named
    assert str(err.value).startswith(f"{named}: ") and words in str(err.value)
    assert named in err.value.fix  # the fix says where to change it
    assert SECRET not in str(err.value)


def test_the_same_value_given_as_an_argument_names_the_argument(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The name follows where the value came from, not which check refused it: an argument
    # overrides a (valid) variable and is named as the argument.
    monkeypatch.setenv("TRUSTMARGIN_ES_URL", "http://es.example:9200")
    monkeypatch.setenv("TRUSTMARGIN_ES_USER", "elastic")
    monkeypatch.setenv("TRUSTMARGIN_ES_PASSWORD", SECRET)
    for kwargs, field in (({"url": "localhost:9200"}, "url"),
                          ({"ca_certs": "/nonexistent/ca.pem"}, "ca_certs"),
                          ({"username": "other"}, "password")):
        with pytest.raises(InvalidInputError) as err:
            es.ElasticsearchSettings.from_env(**kwargs)
        assert err.value.field == field
    with pytest.raises(InvalidInputError) as err:
        openai_compat.OpenAICompatBackend("ftp://h", "m", "smollm2-135m")
    assert err.value.field == "base_url"


def test_eval_names_the_data_folder_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cli_support import run_main

    monkeypatch.setenv("TRUSTMARGIN_DATA", str(tmp_path))
    result = run_main("eval", "--dataset", "cwq", "--run-dir", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "TRUSTMARGIN_DATA: " in result.output and "does not exist" in result.output

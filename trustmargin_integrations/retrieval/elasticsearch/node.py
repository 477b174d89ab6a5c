"""The HTTP node under the Elasticsearch client: one deadline per attempt, headers and body
included.

An elastic-transport ``BaseNode`` (passed as ``node_class``) over a synchronous httpx client
carrying :mod:`trustmargin_integrations.deadline`, so each attempt ends within its
``request_timeout``; the client's retries, node pool and errors work as before. It supports
what :class:`~.connection.ElasticsearchSettings` configures, refuses certificate-fingerprint
pinning and ignores ``HTTP(S)_PROXY``. Why: docs/decisions.md, "One deadline per request".
"""

from __future__ import annotations

import gzip
import ssl
import time
from contextlib import nullcontext

import httpx
from elastic_transport import (
    ApiResponseMeta,
    BaseNode,
    ConnectionError,
    ConnectionTimeout,
    HttpHeaders,
    NodeConfig,
    TlsError,
)
from elastic_transport._node._base import NodeApiResponse, ssl_context_from_node_config
from elastic_transport.client_utils import DEFAULT, DefaultType

from trustmargin_integrations.deadline import bound_by_deadline, request_deadline

# Failures of our own code or the interpreter pass through; only the network's become the
# transport's ConnectionError / ConnectionTimeout (which it retries) or TlsError.
_PASS_THROUGH = (RecursionError, MemoryError, ValueError, TypeError, LookupError,
                 AttributeError, AssertionError, RuntimeError, SystemError, NameError)


def _tls(config: NodeConfig) -> ssl.SSLContext | bool:
    """The TLS context of an https node (elastic-transport's own policy: TLS 1.2 or later,
    verification as configured), False for http."""
    if config.scheme != "https":
        return False
    if config.ssl_assert_fingerprint:
        raise ValueError("certificate fingerprint pinning (ssl_assert_fingerprint) is not "
                         "supported by this node; give the CA with ca_certs instead")
    context = ssl_context_from_node_config(config)
    if config.ssl_context is None and config.verify_certs:
        if config.ca_certs:
            context.load_verify_locations(config.ca_certs)
        else:
            import certifi  # httpx's own dependency, the bundle httpx and urllib3 use

            context.load_verify_locations(certifi.where())
    if config.client_cert:
        context.load_cert_chain(config.client_cert, config.client_key)
    return context


class DeadlineHttpNode(BaseNode):
    """A synchronous elastic-transport node over httpx whose every attempt ends within its
    ``request_timeout``, however slowly the server sends (see the module docstring)."""

    _CLIENT_META_HTTP_CLIENT = ("hx", httpx.__version__)

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self._client = bound_by_deadline(httpx.Client(
            base_url=self.base_url, verify=_tls(config), trust_env=False,
            timeout=config.request_timeout,
            limits=httpx.Limits(max_connections=config.connections_per_node,
                                max_keepalive_connections=config.connections_per_node)))

    def perform_request(self, method: str, target: str, body: bytes | None = None,
                        headers: HttpHeaders | None = None,
                        request_timeout: DefaultType | float | None = DEFAULT,
                        ) -> NodeApiResponse:
        """One attempt, within ``request_timeout`` seconds in all (None: unbounded)."""
        seconds = self.config.request_timeout if request_timeout is DEFAULT else request_timeout
        sent = self._headers.copy()
        if headers:
            sent.update(headers)
        payload = body or None
        if payload is not None and self._http_compress:
            payload = gzip.compress(payload)
            sent["content-encoding"] = "gzip"
        began = time.perf_counter()
        try:
            with request_deadline(seconds) if seconds is not None else nullcontext():
                # request() reads the whole body, so the deadline covers every byte of it.
                response = self._client.request(method, target, content=payload,
                                                headers=dict(sent), timeout=seconds)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            error = _transport_error(exc, seconds)
            self._log_request(method=method, target=target, headers=sent, body=body,
                              exception=error)
            raise error from None
        meta = ApiResponseMeta(status=response.status_code, http_version=
                               response.http_version.partition("/")[2] or "1.1",
                               headers=HttpHeaders(response.headers),
                               duration=time.perf_counter() - began, node=self.config)
        self._log_request(method=method, target=target, headers=sent, body=body, meta=meta,
                          response=response.content)
        return NodeApiResponse(meta, response.content)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


def _transport_error(exc: Exception, seconds: float | None) -> Exception:
    """The elastic-transport error for one failed attempt (its retries key on the type)."""
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        within = "" if seconds is None else f" within {seconds:g} s"
        return ConnectionTimeout(f"Connection timed out: no complete answer{within}",
                                 errors=(exc,))
    cause = exc.__cause__.__context__ if exc.__cause__ is not None else None
    if isinstance(exc, ssl.SSLError) or isinstance(cause, ssl.SSLError):
        return TlsError(str(cause or exc), errors=(exc,))
    return ConnectionError(str(exc), errors=(exc,))


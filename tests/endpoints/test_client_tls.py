"""The clients share one TLS context per CA setting (insight_o3.endpoints.client.tls_context): the HTTP package's
own default, built once instead of once per client (each build reads the CA bundle)."""

from __future__ import annotations

import ssl

from insight_o3.endpoints.client import DeadlineHttpClient, make_client, tls_context
from insight_o3.endpoints.endpoint import Endpoint


def _context(client) -> ssl.SSLContext:
    http = getattr(client, "_client", client)  # an SDK client's HTTP client, or that HTTP client itself
    return http._transport._pool._ssl_context  # httpx's connection pool keeps the context it connects with


def test_clients_share_the_default_context(monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    a = make_client(Endpoint(base_url="https://a.example/v1", api_key="k"))
    b = make_client(Endpoint(base_url="https://b.example/v1", api_key="k"), role="judge")
    assert _context(a) is _context(b) is tls_context()
    ctx = _context(a)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname  # verification stays on
    assert ctx.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded


def test_ssl_cert_file_is_honoured_as_the_http_package_does(monkeypatch, tmp_path):
    """``$SSL_CERT_FILE`` selects another context (httpx's trust_env rule), shared in turn."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    default = tls_context()
    bundle = tmp_path / "ca.pem"
    one_ca = default.get_ca_certs(binary_form=True)[0]  # a CA of the default bundle, alone
    bundle.write_text(ssl.DER_cert_to_PEM_cert(one_ca))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    one = DeadlineHttpClient(deadline=1.0)
    two = DeadlineHttpClient(deadline=1.0)
    assert _context(one) is _context(two) is tls_context() is not default
    assert _context(one).cert_store_stats()["x509_ca"] == 1  # only the file's one CA

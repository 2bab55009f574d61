"""How the SDK trusts an https control plane: one `ssl.SSLContext` per client.

A control plane with a certificate from a public CA needs nothing: the public roots verify it.
One signed by a private CA (or self-signed) is trusted by pointing `LAKESHORE_CA_BUNDLE` at that
CA's PEM file (or a folder of hashed certificates, as `c_rehash` writes it), or by passing
`verify=` to `HttpDispatch`: True (the public roots: SSL_CERT_FILE or SSL_CERT_DIR, else
certifi's bundle, as httpx has them), a path (that bundle only), an `ssl.SSLContext` (used as it
is), or False (no verification at all: a test rig's last resort; anyone on the path can then
read the token). The same context serves the
fast client (http11.py) and httpx, so both trust the same certificates.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import TypeAlias

from dreamlake.lakeshore.errors import InvalidArgument

#: The environment variable naming the CA bundle that signs the control plane's certificate.
CA_BUNDLE_ENV = "LAKESHORE_CA_BUNDLE"

#: What `verify=` takes (None: LAKESHORE_CA_BUNDLE, else the public roots).
Verify: TypeAlias = "bool | str | os.PathLike[str] | ssl.SSLContext | None"


def tls_context(verify: Verify = None) -> ssl.SSLContext:
    """The context an https client verifies the server with; InvalidArgument naming the setting
    when the bundle it names cannot be read."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    setting = "verify="
    if verify is None:
        bundle = os.environ.get(CA_BUNDLE_ENV)
        verify, setting = (bundle, CA_BUNDLE_ENV) if bundle else (True, setting)
    if verify is True:
        return _trusted_roots()
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    path = Path(verify)
    try:
        if path.is_dir():
            return ssl.create_default_context(capath=str(path))
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidArgument(
            f"cannot read the CA bundle {str(path)!r} named by {setting} ({why}): give the PEM "
            "file of the CA that signed the control plane's certificate"
        ) from None


def _trusted_roots() -> ssl.SSLContext:
    """The public roots, found as httpx finds them (so https trusts what it trusted when httpx
    carried it): SSL_CERT_FILE or SSL_CERT_DIR when set, else certifi's bundle."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi
    except ModuleNotFoundError:  # httpx depends on it; the system's store is the fallback
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def untrusted_message(url: str, exc: ssl.SSLCertVerificationError) -> str:
    """What a client says when the server's certificate fails verification."""
    why = exc.verify_message or exc.reason or str(exc)
    bundle = os.environ.get(CA_BUNDLE_ENV)
    now = f"{CA_BUNDLE_ENV}={bundle}" if bundle else f"{CA_BUNDLE_ENV} unset: the public roots"
    return (
        f"the control plane at {url} presented a TLS certificate this client does not trust "
        f"({why}; {now}): set {CA_BUNDLE_ENV} to the PEM file of the CA that signed it, or "
        "pass verify= to HttpDispatch"
    )

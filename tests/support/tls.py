"""Throwaway TLS material for tests: a private CA and a server certificate it signs for
127.0.0.1 and localhost, made with the `cryptography` package when it is installed, else with the
`openssl` command; the test skips when neither is there."""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA's certificate: what LAKESHORE_CA_BUNDLE names
    cert: Path  # the server's certificate, signed by `ca`
    key: Path  # the server's unencrypted private key


def make_certs(folder: Path, name: str = "lakeshore-test") -> Certs:
    folder.mkdir(parents=True, exist_ok=True)
    out = Certs(folder / f"{name}-ca.pem", folder / f"{name}-cert.pem", folder / f"{name}-key.pem")
    try:
        import cryptography  # noqa: F401
    except ModuleNotFoundError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor openssl is installed")
        _with_openssl(out, name)
    else:
        _with_cryptography(out, name)
    return out


def _with_cryptography(out: Certs, name: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _with_openssl(out: Certs, name: str) -> None:
    folder = out.ca.parent
    ca_key = folder / f"{name}-ca-key.pem"
    csr = folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    ca_subject = ["-subj", f"/CN={name} CA", "-days", "1"]
    run("req", "-x509", *ec_key, "-keyout", str(ca_key), "-out", str(out.ca), *ca_subject)
    run("req", *ec_key, "-keyout", str(out.key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    signer = ["-CA", str(out.ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "1"]
    run("x509", "-req", "-in", str(csr), *signer, "-out", str(out.cert), "-extfile", str(ext))

"""Certificates for the test control plane, made with the `cryptography` package.

One cluster CA signs the apiserver's serving cert, kwok's kubelet-like serving
cert and every client cert (admin, controller-manager, scheduler, operator,
restricted test users). The training-operator's webhook gets its own CA, in the
exact shape its cert-controller rotator accepts (see operator.py).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
LOOPBACK = ipaddress.ip_address("127.0.0.1")


def key_pem(key: PrivateKey) -> bytes:
    # Traditional OpenSSL format: PKCS#1 for RSA ("RSA PRIVATE KEY"), which
    # the operator's cert-controller insists on; SEC1 for EC.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        crt, key = directory / f"{name}.crt", directory / f"{name}.key"
        crt.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return crt, key


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, days: int) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
    )


def new_key(rsa_key: bool = False) -> PrivateKey:
    if rsa_key:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(cn: str, rsa_key: bool = False, dns_names: tuple[str, ...] = (), days: int = 3650) -> KeyPair:
    key = new_key(rsa_key)
    builder = (
        _builder(_name(cn), _name(cn), key, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, True, False, False, False, True, False, False, False), critical=True)
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
    return KeyPair(builder.sign(key, hashes.SHA256()), key)


def _sign_leaf(
    ca: KeyPair,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    *,
    sans: list[x509.GeneralName],
    rsa_key: bool,
    days: int,
) -> KeyPair:
    key = new_key(rsa_key)
    builder = (
        _builder(subject, ca.cert.subject, key, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def serving_cert(
    ca: KeyPair,
    cn: str,
    dns_names: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
    *,
    rsa_key: bool = False,
    days: int = 3650,
) -> KeyPair:
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    return _sign_leaf(ca, _name(cn), ExtendedKeyUsageOID.SERVER_AUTH, sans=sans, rsa_key=rsa_key, days=days)


def client_cert(ca: KeyPair, user: str, groups: tuple[str, ...] = (), days: int = 30) -> KeyPair:
    """Kubernetes x509 authn: CN is the user name, each O a group."""
    return _sign_leaf(ca, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH, sans=[], rsa_key=False, days=days)


def write_public_key(key: PrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return path


def write_private_key(key: PrivateKey, path: Path) -> Path:
    path.write_bytes(key_pem(key))
    path.chmod(0o600)
    return path

"""The Amazon RDS root CAs slurmdbd verifies a remote RDS/Aurora accounting database against.

Contract: ``rds-ca-roots.pem`` ships in the package (never from a bucket), its SHA-256 is pinned
(``RDS_CA_ROOTS_SHA256``), every certificate in it is a self-signed Amazon RDS root valid for decades, each
preceded by a ``# <common name>`` line the accounting step greps for the endpoint's region. For an endpoint
``*.<region>.rds.amazonaws.com`` of a covered region the step installs it root 0644 at
/etc/mlcluster/rds-ca-roots.pem and writes ``StorageParameters=SSL_CA=<that path>`` (slurmdbd.conf(5),
Slurm 22.05 and later: SSL_CERT, SSL_CA, SSL_CAPATH, SSL_KEY, SSL_CIPHER); any other host gets no SSL_CA and a
warning. The secret refresh keeps the line.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR, RDS_CA_ROOTS, RDS_CA_ROOTS_SHA256, manifest
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, Sandbox

BUNDLE = HYPERPOD_DIR / RDS_CA_ROOTS
ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurm-db-AbCdEf"
SECRET = json.dumps({"username": "slurm", "password": "first-Pass1"})
MINIMAL = {**FEATURES, "users": [], "docker": False, "enroot_pyxis": False, "home_on_fsx": False}
CA_LINE = "StorageParameters=SSL_CA=/etc/mlcluster/rds-ca-roots.pem\n"


def test_the_bundle_is_pinned_and_in_the_uploaded_manifest() -> None:
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
    assert digest == RDS_CA_ROOTS_SHA256
    assert f"{digest}  {RDS_CA_ROOTS}\n" in manifest()


def _verify_self_signed(cert: x509.Certificate) -> None:
    key = cert.public_key()
    algorithm = cert.signature_hash_algorithm
    assert algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), algorithm)
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))


def test_every_certificate_is_a_long_lived_amazon_rds_root_named_by_the_line_before_it() -> None:
    text = BUNDLE.read_text(encoding="ascii")
    certs = x509.load_pem_x509_certificates(text.encode())
    names = [
        line[2:].split(" (valid until")[0] for line in text.splitlines() if line.endswith(")") and " Root CA " in line
    ]
    assert len(certs) == len(names) == 87
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30 * 365)
    for cert, name in zip(certs, names, strict=True):
        common = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        assert common == name
        assert cert.issuer == cert.subject and cert.not_valid_after_utc > soon
        assert (
            cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)[0].value == "Amazon Web Services, Inc."
        )
        _verify_self_signed(cert)
    for region in ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-northeast-1"):
        for kind in ("RSA2048 G1", "RSA4096 G1", "ECC384 G1"):
            assert f"Amazon RDS {region} Root CA {kind}" in names


def controller(tmp_path: Path, endpoint: str) -> tuple[Sandbox, subprocess.CompletedProcess[str]]:
    features = {**MINIMAL, "accounting": {"mode": "remote", "endpoint": endpoint, "secret_arn": ARN}}
    sandbox = Sandbox(tmp_path, ips=CONTROLLER_IP, features=features, extra_env={"STUB_SECRET": SECRET})
    result = sandbox.run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sandbox, result


@pytest.mark.parametrize(
    "host",
    [
        "mlc-acct.cluster-c9akciq32.us-west-2.rds.amazonaws.com",
        "mlc-acct.cluster-c9akciq32.ap-northeast-1.rds.amazonaws.com",
        # us-east-1 has a Beta and a Preview root too: "Amazon RDS Beta us-east-1 ..." is not this region's.
        "mlc-acct.cluster-ro-c9akciq32.us-east-1.rds.amazonaws.com",
    ],
)
def test_an_rds_endpoint_gets_the_pinned_roots_as_ssl_ca(tmp_path: Path, host: str) -> None:
    sandbox, _ = controller(tmp_path, f"{host}:3306")
    conf = sandbox.read("/opt/slurm/etc/slurmdbd.conf")
    assert f"StorageHost={host}\n" in conf and CA_LINE in conf
    installed = sandbox.root / "etc/mlcluster/rds-ca-roots.pem"
    # Only the endpoint's region's three roots: slurmdbd checks the chain, not the name (issue 33 item 2).
    region = host.split(".")[-4]
    text = installed.read_text(encoding="ascii")
    names = [
        c.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        for c in x509.load_pem_x509_certificates(text.encode())
    ]
    assert sorted(names) == [
        f"Amazon RDS {region} Root CA {kind}" for kind in ("ECC384 G1", "RSA2048 G1", "RSA4096 G1")
    ]
    assert text in BUNDLE.read_text(encoding="ascii")  # copied as they are, comment lines included
    info = installed.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o644)
    # The rotated secret is applied without losing the line.
    refresh = subprocess.run(
        ["bash", str(sandbox.root / "usr/local/sbin/mlcluster-accounting-secret"), "watch"],
        env={
            **sandbox.env(),
            "MLC_LIFECYCLE_DIR": str(sandbox.root / "opt/mlcluster/lifecycle"),
            "STUB_SECRET": json.dumps({"username": "slurm", "password": "rotated-Pass2"}),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert refresh.returncode == 0, refresh.stderr
    after = sandbox.read("/opt/slurm/etc/slurmdbd.conf")
    assert "StoragePass=rotated-Pass2\n" in after and CA_LINE in after


@pytest.mark.parametrize(
    ("host", "warning"),
    [
        ("db.example.internal", "db.example.internal is not an Amazon RDS endpoint: slurmdbd.conf gets no SSL_CA"),
        # A look-alike: the RDS domain inside a longer name is not an RDS endpoint.
        ("db.us-west-2.rds.amazonaws.com.example.org", "is not an Amazon RDS endpoint"),
        # A region the pinned roots do not cover (opened after them).
        ("acct.cluster-x.mx-central-1.rds.amazonaws.com", "rds-ca-roots.pem has no root CA for mx-central-1"),
    ],
)
def test_other_hosts_get_no_ssl_ca_and_a_warning(tmp_path: Path, host: str, warning: str) -> None:
    sandbox, _ = controller(tmp_path, f"{host}:3306")
    conf = sandbox.read("/opt/slurm/etc/slurmdbd.conf")
    assert "StorageParameters" not in conf
    assert not (sandbox.root / "etc/mlcluster/rds-ca-roots.pem").exists()
    assert warning in sandbox.read("/var/log/provision/accounting.log")

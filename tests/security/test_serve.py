"""``podfleet up`` as an operator runs it: private files, a keyed and signed audit trail,
TLS from --tls-cert/--tls-key, and a loud warning when exposed without TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from podfleet.api.server import build_server, check_tls
from podfleet.api.testing import free_port
from podfleet.errors import InvalidInputError
from podfleet.security.files import exposure_warning
from podfleet.settings import get_settings

TOKEN = "pf_serve-test-admin-token-0123456789abcdef"


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_exposure_warning_and_tls_flags(tmp_path: Path) -> None:
    assert exposure_warning("127.0.0.1", tls=False) is None and exposure_warning("localhost", tls=False) is None
    assert exposure_warning("0.0.0.0", tls=True) is None
    assert "without TLS" in (exposure_warning("0.0.0.0", tls=False) or "")
    with pytest.raises(InvalidInputError, match="go together"):
        check_tls(str(tmp_path / "c.pem"), None)
    with pytest.raises(InvalidInputError, match="not a readable file"):
        check_tls(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))


def test_the_server_keys_its_audit_chain(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        server = build_server(get_settings(db=f"sqlite:///{tmp_path / 'pf.db'}", key_dir=str(tmp_path / "keys"),
                                           admin_token=TOKEN))
    finally:
        os.umask(old)
    try:
        first = next(iter(server.store.iter_audit()))
        assert first.action == "CreateToken" and first.key_id == "audit-mac-v1"
        assert server.digests is not None and server.digests.directory == tmp_path / "pf.db.digests"
        assert server.app.state.audit_trail is not None
        assert (tmp_path / "pf.db").stat().st_mode & 0o077 == 0
        server.digests.stop()
        ok, _, msg = server.app.state.audit_trail.verify(server.store.iter_audit(), server.store.audit_keys).as_tuple()
        assert ok and "1 signed digest" in msg
    finally:
        server.store.close()


@pytest.mark.realproc
def test_up_serves_tls_and_writes_private_files(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    db = tmp_path / "pf.db"
    env = {**os.environ, "PODFLEET_ADMIN_TOKEN": TOKEN, "PODFLEET_KEY_DIR": str(tmp_path / "keys")}
    proc = subprocess.Popen([sys.executable, "-m", "podfleet", "up", "--db", f"sqlite:///{db}", "--port", str(port),
                             "--host", "0.0.0.0", "--tls-cert", str(cert), "--tls-key", str(key), "--output", "json"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"https://127.0.0.1:{port}/v1/clusters", verify=str(cert),
                              headers={"Authorization": f"Bearer {TOKEN}"})
                if r.status_code != 503:  # 503 starting: listening, the engine still reloading
                    break
                assert proc.poll() is None and time.monotonic() < deadline, "podfleet up never finished starting"
                time.sleep(0.2)
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "podfleet up did not serve TLS"
                time.sleep(0.2)
        assert r.status_code == 200 and r.headers["strict-transport-security"].startswith("max-age=")
        for p in (db, *tmp_path.joinpath("keys").iterdir()):
            assert p.stat().st_mode & 0o077 == 0, p
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert b"without TLS" not in err  # TLS on: no warning even on 0.0.0.0
    digests = list((tmp_path / "pf.db.digests").iterdir())
    assert digests and all(p.stat().st_mode & 0o777 == 0o600 for p in digests)  # written at shutdown


@pytest.mark.realproc
def test_up_warns_loudly_when_exposed_without_tls(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PODFLEET_ADMIN_TOKEN": TOKEN, "PODFLEET_KEY_DIR": str(tmp_path / "keys")}
    proc = subprocess.Popen([sys.executable, "-m", "podfleet", "up", "--db", f"sqlite:///{tmp_path / 'pf.db'}",
                             "--port", str(port), "--host", "0.0.0.0", "--output", "json"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert b"WARNING: serving on 0.0.0.0 without TLS" in err

"""Fixtures for the official-SDK client tests: a real toolgate server on a free loopback port.

Environment:
  TOOLGATE_BIN                the toolgate binary (required)
  TOOLGATE_TEST_DATABASE_URL  optional postgres://… URL; passed as --database-url
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    bin: str
    base_url: str
    data_dir: Path
    database_url: str | None
    log_path: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["TOOLGATE_DATA_DIR"] = str(self.data_dir)
        env["TOOLGATE_PUBLIC_URL"] = self.base_url
        if self.database_url:
            env["TOOLGATE_DATABASE_URL"] = self.database_url
        return env

    def cli(self, *args: str) -> dict:
        """Runs `toolgate ARGS --data-dir DIR` and parses the one JSON object it prints."""
        argv = [self.bin, *args, "--data-dir", str(self.data_dir)]
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{argv} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{argv} did not print one JSON object: {proc.stdout!r}") from exc

    def create_account(self) -> dict:
        return self.cli("account", "create", "--email", f"sdk-{uuid.uuid4().hex[:12]}@example.test")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no server log)"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    binary = os.environ.get("TOOLGATE_BIN")
    if not binary:
        pytest.fail("TOOLGATE_BIN is not set: point it at the toolgate binary (target/release/toolgate)")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"TOOLGATE_BIN={binary} is not an executable file")
    root = tmp_path_factory.mktemp("toolgate")
    data_dir = root / "data"
    data_dir.mkdir()
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    database_url = os.environ.get("TOOLGATE_TEST_DATABASE_URL") or None
    srv = Server(binary, base_url, data_dir, database_url, root / "server.log")
    argv = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir), "--public-url", base_url]
    if database_url:
        argv += ["--database-url", database_url]
    log = open(srv.log_path, "wb")
    proc = subprocess.Popen(argv, env=srv.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"toolgate serve exited with {proc.returncode} before it was ready:\n{srv.log_tail()}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"toolgate serve did not answer GET /healthz with 200 within 60 s:\n{srv.log_tail()}")
            time.sleep(0.1)
        yield srv
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        log.close()


@pytest.fixture
def account(server: Server) -> dict:
    """A fresh account (so its free allowance is untouched)."""
    acct = server.create_account()
    for field in ("account_id", "email", "api_key", "personal_url"):
        assert field in acct, f"account create printed no {field!r}: {acct}"
    return acct

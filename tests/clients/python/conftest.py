"""Fixtures for the official-SDK client tests: a real toolgate server on a loopback port it chose
(port 0) and announced.

Environment:
  TOOLGATE_BIN                the toolgate binary (required)
  TOOLGATE_TEST_DATABASE_URL  optional postgres://… URL; passed as --database-url
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def _announced(proc: subprocess.Popen, seconds: float) -> dict | None:
    """The JSON line `toolgate serve --listen 127.0.0.1:0` prints on stdout once it is bound
    (`{"listening": ..., "public_url": ...}`), or None if it ends or says nothing in time. The
    rest of its stdout is drained in the background so the server never blocks on it."""
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    line = proc.stdout.readline() if ready else b""
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    try:
        return json.loads(line)
    except ValueError:
        return None


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
    database_url = os.environ.get("TOOLGATE_TEST_DATABASE_URL") or None
    srv = Server(binary, "", data_dir, database_url, root / "server.log")
    # port 0: the server takes a free port and announces it, so no port is bound twice
    argv = [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)]
    if database_url:
        argv += ["--database-url", database_url]
    serve_env = {k: v for k, v in srv.env().items() if k != "TOOLGATE_PUBLIC_URL"}
    log = open(srv.log_path, "wb")
    proc = subprocess.Popen(argv, env=serve_env, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        announced = _announced(proc, 60)
        if announced is None:
            pytest.fail(f"toolgate serve announced no address (exit status {proc.poll()}):\n{srv.log_tail()}")
        srv.base_url = announced["public_url"]
        if httpx.get(f"{srv.base_url}/healthz", timeout=30).status_code != 200:
            pytest.fail(f"toolgate serve did not answer GET /healthz with 200:\n{srv.log_tail()}")
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

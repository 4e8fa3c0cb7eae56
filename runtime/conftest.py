"""Fixtures of the runtime's tests; the helpers are in harness.py (with how to run the tests)."""

import os
import shutil
import subprocess
import tempfile

import pytest

from harness import CANARY, PYTHON, Zygote, harden_lib


@pytest.fixture(scope="module")
def zygote():
    """A zygote without the confinement library, started with a dirty environment (it must
    re-execute itself with a clean one)."""
    z = Zygote(env={CANARY: "leaked-if-seen"})
    yield z
    z.close()


@pytest.fixture(scope="module")
def hardened():
    """A zygote with the confinement library and the production preload."""
    z = Zygote(f"--harden-lib={harden_lib()}", env={CANARY: "leaked-if-seen"})
    yield z
    z.close()


@pytest.fixture(scope="module")
def base_prefix():
    return subprocess.run([str(PYTHON), "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def workspaces():
    """A root for hardened workspaces outside /tmp (each session sees its own empty /tmp there),
    searchable by the sessions' uid."""
    root = tempfile.mkdtemp(prefix="tg-hardened-", dir="/var/tmp")
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)

"""`pip install` in a session: into the workspace's prefix (never the runtime), importable in the
next cell without a restart, from bash and from Python, and after a restore. The wheels come from a
directory (PIP_FIND_LINKS) instead of the service's index, which the server's suite exercises."""

import base64
import hashlib
import os
import zipfile

from test_checkpoint import checkpointed, wake


def build_wheel(directory, name, version, body):
    """A pure-Python wheel: NAME/__init__.py and its dist-info (METADATA, WHEEL, RECORD)."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": body,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: toolgate-tests\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            data = text.encode()
            z.writestr(member, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def test_pip_installs_into_the_workspace_and_the_next_cell_imports_it(zygote, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "tgdemo_a", "1.0", "VALUE = 'a'\n")
    build_wheel(wheels, "tgdemo_b", "1.0", "VALUE = 'b'\n")
    env = {"HTTP_PROXY": "http://127.0.0.1:9", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    s = zygote.fork("pip", env=env)
    try:
        prefix = os.path.join(s.cwd, ".local")
        # checked first: without it pip would write into the runtime itself
        assert s.value("import os\nos.environ.get('PIP_PREFIX')") == repr(prefix)
        assert s.bash("echo $PIP_PREFIX")["stdout"] == prefix + "\n"
        # an import that fails before the install must not hide the package after it
        assert s.run("import tgdemo_a")["error"]["type"] == "ModuleNotFoundError"
        r = s.bash("pip install tgdemo_a")
        assert r["exit_status"] == 0, r
        assert "Successfully installed tgdemo_a-1.0" in r["stdout"]
        assert s.value("import tgdemo_a\ntgdemo_a.VALUE") == "'a'"
        assert s.value("tgdemo_a.__file__.startswith(os.environ['PIP_PREFIX'] + '/')") == "True"
        r = s.run("import subprocess, sys\n"
                  "subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', 'tgdemo_b'], check=True)")
        assert r["error"] is None, r
        assert s.value("import tgdemo_b\ntgdemo_b.VALUE") == "'b'"
        assert s.bash("python -c 'import tgdemo_a; print(tgdemo_a.VALUE)'")["stdout"] == "a\n"
        assert "already satisfied" in s.bash("pip install tgdemo_a")["stdout"]
        # a restored session imports them again (the prefix is in the workspace it brings back)
        checkpointed(s)
        s, _ = wake(zygote, s, "pip-2")
        assert s.value("tgdemo_a.VALUE + tgdemo_b.VALUE") == "'ab'"
    finally:
        s.close()


def test_a_session_without_network_keeps_its_environment(zygote):
    s = zygote.fork("no-pip")
    try:
        assert s.value("import os\n'PIP_PREFIX' in os.environ") == "False"
        # the workspace's prefix is on sys.path all the same (after the runtime's own)
        site = s.value("import sys\nsys.path[-1]")
        assert site.startswith(repr(os.path.join(s.cwd, ".local", "lib"))[:-1]), site
    finally:
        s.close()

"""The zygote's start-up, before anything else is imported: arguments, a clean environment (a
re-execution of itself when needed), then the fork server of toolgate._zygote. Only os and sys
here: the zygote usually re-executes itself once, and what is imported before that is paid twice.
Start-up and the control channel are described in runtime/PROTOCOL.md."""

import os
import sys

DEFAULT_PRELOAD = ("numpy", "pandas", "matplotlib.pyplot")
_ENV_KEEP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")   # machine quirks, not secrets
_REEXEC_MARK = "TOOLGATE_ZYGOTE_REEXECUTED"


def _zygote_env():
    """The whole environment the zygote runs with."""
    prefix = sys.prefix
    env = {
        "PATH": f"{prefix}/bin:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    mplconfig = os.path.join(prefix, "mplconfig")
    if os.environ.get("MPLCONFIGDIR"):
        env["MPLCONFIGDIR"] = os.environ["MPLCONFIGDIR"]
    elif os.path.isdir(mplconfig):
        env["MPLCONFIGDIR"] = mplconfig
    for k in _ENV_KEEP:
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def _reexec_if_dirty(ctrl_fd):
    """Re-executes this process (the entry script, THIS_FILE, with the same arguments) with a
    clean environment unless it already has one."""
    env = _zygote_env()
    if dict(os.environ) == env or not sys.executable or os.environ.get(_REEXEC_MARK) == "1":
        return                       # clean already, or re-executed once (never loop)
    env[_REEXEC_MARK] = "1"
    os.set_inheritable(ctrl_fd, True)
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    os.execve(sys.executable, argv, env)


def _parse_args(argv):
    if len(argv) < 2:
        sys.exit("usage: toolgate_zygote.py FD [--preload=a,b] [--harden-lib=PATH] "
                 "[--own-mounts=SOURCE] [--checklist-timeout=SECONDS]")
    try:
        fd = int(argv[1])
    except ValueError:
        sys.exit("toolgate_zygote.py: FD must be a descriptor number")
    preload, harden, own_mounts, timeout = list(DEFAULT_PRELOAD), None, None, None
    for a in argv[2:]:
        if a.startswith("--preload="):
            preload = [m for m in a.split("=", 1)[1].split(",") if m]
        elif a.startswith("--harden-lib="):
            harden = a.split("=", 1)[1]
        elif a.startswith("--own-mounts="):
            own_mounts = a.split("=", 1)[1]
        elif a.startswith("--checklist-timeout="):
            try:
                timeout = float(a.split("=", 1)[1])
            except ValueError:
                timeout = -1.0
            if not 0 < timeout <= 600:
                sys.exit("toolgate_zygote.py: --checklist-timeout must be seconds in (0, 600]")
        else:
            sys.exit(f"toolgate_zygote.py: unknown option {a}")
    for name, value in (("--own-mounts", own_mounts), ("--checklist-timeout", timeout)):
        if value is not None and harden is None:
            sys.exit(f"toolgate_zygote.py: {name} needs --harden-lib")
    return fd, preload, harden, own_mounts, timeout


def main(argv=None):
    ctrl_fd, preload, harden_lib, own_mounts, timeout = _parse_args(sys.argv if argv is None
                                                                    else argv)
    _reexec_if_dirty(ctrl_fd)
    os.environ.update(_zygote_env())    # before any import that reads them
    # Everything a session runs is imported here, before the first fork: a hardened session's
    # root holds the runtime but not this directory, and finds these modules in sys.modules.
    from toolgate._zygote import Zygote
    Zygote(ctrl_fd, preload, harden_lib, own_mounts, timeout).serve()

"""Where `pip install` in a session puts packages. The runtime's environment is read-only, so they go
under the workspace, in the prefix `<workspace>/.local` (as `pip install --prefix` lays it out), and
persist with the session (hibernation archives the workspace). The prefix's site directory is on the
session's sys.path from its start (a restored session's too) and on its subprocesses' (PYTHONPATH),
after the runtime's own packages, so what one cell installs, in bash or with `python -m pip` from
Python, imports in the next without a restart."""

import os
import site
import sys
import sysconfig

PREFIX = ".local"

# the site directories of a prefix, relative to it (lib/python3.X/site-packages; platlib apart
# only where the platform's lib directory differs)
_ROOT = "/prefix"
_SITE_DIRS = tuple(dict.fromkeys(
    os.path.relpath(sysconfig.get_path(kind, "posix_prefix", vars={"base": _ROOT, "platbase": _ROOT}),
                    _ROOT)
    for kind in ("purelib", "platlib")))


def site_dirs(workspace):
    """The prefix's site directories in `workspace`."""
    return [os.path.join(workspace, PREFIX, d) for d in _SITE_DIRS]


def pip_env(workspace, path):
    """The variables that make pip (and what it installs) work in a session with network: installs
    into the workspace's prefix, its scripts on PATH (before `path`), no prompt, no version check,
    and no cache of pip's own (the service caches files on the host; one in the workspace would
    only fill it)."""
    prefix = os.path.join(workspace, PREFIX)
    return {
        "PIP_PREFIX": prefix,
        "PYTHONPATH": os.pathsep.join(site_dirs(workspace)),
        "PATH": f"{prefix}/bin:{path}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
        "PIP_NO_WARN_SCRIPT_LOCATION": "1",
    }


def add_site_dirs(dirs):
    """Puts `dirs` on sys.path after the runtime's own entries; one that exists is added as a site
    directory (its .pth files read), as Python would at start-up."""
    for d in dirs:
        if d in sys.path:
            continue
        if os.path.isdir(d):
            site.addsitedir(d)
        else:
            sys.path.append(d)


def forget_missing(dirs):
    """An import that looked in a site directory before it existed left "no finder" for it in
    sys.path_importer_cache, for the life of the process: dropped before each run, so a package
    installed since is found."""
    cache = sys.path_importer_cache
    for d in dirs:
        if d in cache and cache[d] is None:
            del cache[d]

"""toolgate's Python fork server ("zygote") and session executor: the entry script.

    RUNTIME/bin/python -I runtime/toolgate_zygote.py FD [--preload=MOD,MOD,...] [--harden-lib=PATH]

FD is an inherited AF_UNIX SOCK_STREAM socket, the control channel to the server. The code is the
package toolgate/ beside this file; the protocol on the control and session channels is
runtime/PROTOCOL.md. This script puts its own directory on sys.path just long enough to import
the package (sessions never see it there), then runs the zygote.
"""

import os
import sys

if __name__ == "__main__":
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, _HERE)
    try:
        import toolgate._boot
    finally:
        sys.path.remove(_HERE)
    toolgate._boot.main()

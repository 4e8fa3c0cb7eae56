#!/usr/bin/python3
"""Usage: smtp-sink.py DIR [--port N] [--host ADDR] [--auth user:pass] [--starttls CERT:KEY]

A real SMTP server for tests (Debian's python3-aiosmtpd, installed by scripts/deps.sh). It
listens on ADDR (default 127.0.0.1) port N (default 0: any free port), prints `READY <port>` on
stdout once it accepts connections, and saves each message it is given, raw bytes as received,
as DIR/1.eml, DIR/2.eml, ... (each written under a temporary name, then renamed). With --auth,
AUTH PLAIN and LOGIN are offered over plain SMTP and required before MAIL FROM, and only that
user and password are accepted. With --starttls, STARTTLS is offered (not required) with that
certificate chain and key (PEM files). Runs until SIGTERM or SIGINT.
"""

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Saver:
    """Writes each message's raw bytes to DIR/N.eml, N counting from 1."""

    def __init__(self, directory):
        self.directory = directory
        self.count = 0
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.count += 1
            number = self.count
        path = os.path.join(self.directory, f"{number}.eml")
        with open(path + ".tmp", "wb") as out:
            out.write(envelope.original_content)
        os.rename(path + ".tmp", path)
        return "250 Message accepted for delivery"


class Authenticator:
    """Accepts exactly one user and password (AUTH PLAIN or LOGIN)."""

    def __init__(self, user, password):
        self.user = user.encode()
        self.password = password.encode()

    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == self.user
            and auth_data.password == self.password
        )
        return AuthResult(success=ok)


class AnyPortController(Controller):
    """A Controller that may listen on port 0: it learns the port the system chose before
    its readiness check connects to it."""

    def _trigger_server(self):
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def main():
    parser = argparse.ArgumentParser(description="A local SMTP sink for tests.")
    parser.add_argument("dir", help="where messages are saved as N.eml")
    parser.add_argument("--port", type=int, default=0, help="0 (default): any free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--auth", metavar="USER:PASS", help="require AUTH with these")
    parser.add_argument("--starttls", metavar="CERT:KEY", help="offer STARTTLS with these")
    args = parser.parse_args()

    os.makedirs(args.dir, exist_ok=True)
    options = {}
    if args.auth is not None:
        user, sep, password = args.auth.partition(":")
        if not sep:
            parser.error("--auth takes user:pass")
        # Plain-text AUTH is the point of a loopback test server: silence aiosmtpd's warnings.
        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
        logging.getLogger("mail.log").setLevel(logging.ERROR)
        options = dict(
            authenticator=Authenticator(user, password),
            auth_required=True,
            auth_require_tls=False,
        )
    if args.starttls is not None:
        cert, sep, key = args.starttls.partition(":")
        if not sep:
            parser.error("--starttls takes cert.pem:key.pem")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        options.update(tls_context=context, require_starttls=False)
    controller = AnyPortController(
        Saver(args.dir), hostname=args.host, port=args.port, **options
    )
    controller.start()
    print(f"READY {controller.port}", flush=True)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(0.2):  # a bare wait() would not let the signal handler run
        pass
    controller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

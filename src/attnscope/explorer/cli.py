"""``attnscope``: the command line (``attnscope explore RESULTS_DIR``)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import sys

from attnscope.explorer.reader import StoreReader
from attnscope.explorer.server import make_server


def _color_max(text: str) -> float | None:
    return None if text.lower() in ("", "none", "null") else float(text)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="attnscope")
    commands = parser.add_subparsers(dest="command", required=True)
    explore = commands.add_parser("explore", help="browse the attention stores of a run in a web page")
    explore.add_argument("results", help="the run's results folder (holds attention/{model}/{variant}/)")
    explore.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    explore.add_argument("--port", type=int, default=8765, help="port (0: a free one; default: %(default)s)")
    for level in ("token", "word"):
        explore.add_argument(
            f"--color-max-{level}",
            type=_color_max,
            default=None,
            help=f"top of the {level}-level colour scale (figures.color_max.{level}; none: each map's max)",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the reader's problems, on stderr
    reader = StoreReader(args.results, {"token": args.color_max_token, "word": args.color_max_word})
    try:
        server = make_server(reader, args.host, args.port)
    except OSError as err:  # the port taken, an address not of this machine, a name that does not resolve
        print(
            f"attnscope explore: cannot listen on {args.host} port {args.port}: {err.strerror or err}; "
            "pass another --port (0: a free one) or --host",
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address[:2]
    if not ipaddress.ip_address(host).is_loopback:
        print(
            f"attnscope explore: warning: {host} is not a loopback address: this serves the results to "
            "the network, without authentication (the default --host 127.0.0.1 serves this machine only)",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    print(f"attnscope explorer: {len(reader.stores)} stores; open http://{shown}:{port}/", flush=True)
    with contextlib.suppress(KeyboardInterrupt), server:  # Ctrl-C stops it; the socket is closed either way
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

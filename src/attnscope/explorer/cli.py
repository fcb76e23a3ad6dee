"""``attnscope``: the command line (``attnscope explore RESULTS_DIR``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

from attnscope.explorer.server import Explorer, make_server


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
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    explorer = Explorer(args.results, {"token": args.color_max_token, "word": args.color_max_word})
    for problem in explorer.problems:
        print(f"attnscope explore: {problem}", file=sys.stderr)
    server = make_server(explorer, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"attnscope explorer: {len(explorer.stores)} stores; open http://{host}:{port}/", flush=True)
    with contextlib.suppress(KeyboardInterrupt), server:  # Ctrl-C stops it; the socket is closed either way
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

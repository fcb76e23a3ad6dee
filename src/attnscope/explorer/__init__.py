"""The attention explorer: a local web page over the attention stores of a finished run
(``attnscope explore RESULTS_DIR``; docs/explorer.md)."""

from attnscope.explorer.server import Explorer, make_server

__all__ = ["Explorer", "make_server"]

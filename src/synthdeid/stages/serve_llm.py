"""Start, stop or check a local llama.cpp chat server on loopback (serve-llm).

``synthdeid serve-llm start --model bundled:smollm2 --state-dir .llm-server``
returns once the server answers and prints its API root, and only that, on
stdout, so a script can write ``URL=$(synthdeid serve-llm start ...)`` and give
``$URL`` to an ``openai`` backend. The server keeps running in the background
until ``synthdeid serve-llm stop --state-dir .llm-server``; ``status`` prints
the URL of a running server (nothing when none runs). The state folder holds
the server's record (``server.json``) and its log (``server.log``, local
only). See :mod:`synthdeid.llm.server`.
"""

from __future__ import annotations

import argparse
import logging

from synthdeid.cli_types import non_negative_int, output_dir, positive_int
from synthdeid.llm.server import server_status, start_server, stop_server

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = ".llm-server"


def register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    parser.add_argument(
        "--state-dir",
        type=output_dir,
        default=DEFAULT_STATE_DIR,
        help=f"folder of the server's record and log (default {DEFAULT_STATE_DIR})",
    )
    start = parser.add_argument_group("start")
    start.add_argument(
        "--model",
        default="bundled:smollm2",
        help="a GGUF model: bundled:<name> or a .gguf file (default bundled:smollm2)",
    )
    start.add_argument(
        "--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)"
    )
    start.add_argument(
        "--port", type=non_negative_int, default=0, help="port; 0 picks a free one (default)"
    )
    start.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="CPU threads (default 1: faster than 2 next to other work on a small machine)",
    )
    start.add_argument(
        "--ctx", type=positive_int, default=4096, help="context size in tokens (default 4096)"
    )
    start.add_argument(
        "--timeout",
        type=positive_int,
        default=180,
        help="seconds to wait for the server to answer before giving up (default 180)",
    )


def run(args: argparse.Namespace) -> None:
    if args.action == "start":
        handle = start_server(
            args.model,
            state_dir=args.state_dir,
            port=args.port,
            threads=args.threads,
            n_ctx=args.ctx,
            host=args.host,
            timeout_s=args.timeout,
        )
        print(handle.base_url, flush=True)
    elif args.action == "stop":
        if not stop_server(args.state_dir):
            log.info("no LLM server was running from %s", args.state_dir)
    else:
        running = server_status(args.state_dir)
        if running is None:
            log.info("no LLM server runs from %s", args.state_dir)
        else:
            log.info(
                "LLM server pid %d, model %s, log %s", running.pid, running.model, running.log_path
            )
            print(running.base_url, flush=True)

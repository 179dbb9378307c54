"""llama.cpp's OpenAI-compatible server for the rehearsal's CI tier (`cluster_rehearsal.sh --ci`): the served
roles' stand-in for vLLM's server, from the project's own venv (xllamacpp runs llama.cpp's C++ server in this
process; its HTTP side answers /v1/models, /v1/chat/completions and /v1/completions).

    python -m harness.rehearsal.llama_server --model gemma3-270m --port 8001 [--threads 1 --ctx-size 4096]

It prints `listening on http://127.0.0.1:<port>` once the model is loaded and serves until it is killed.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llama_server", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a GGUF model name of the local model cache, or a path")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--parallel", type=int, default=2, help="requests decoded together (server slots)")
    args = parser.parse_args(argv)

    import xllamacpp as xlc

    from transforms.llm.prepare import gguf_path

    p = xlc.CommonParams()
    p.model.path = str(gguf_path(args.model))
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx_size * args.parallel
    for cpu in (p.cpuparams, p.cpuparams_batch):
        cpu.n_threads = args.threads
    p.offline = True  # never fetch a model from a hub
    p.ui = False
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.verbosity = -1
    server = xlc.Server(p)
    print(f"listening on {server.listening_address}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m connectors.simulator --port N`: the feed simulator as a server process (the
stack's `simulator` component, compose's service), until SIGTERM or Ctrl-C. For a
terminal, `lakehouse simulator` serves the same and prints the feeds' addresses."""

from __future__ import annotations

import argparse
import signal
import threading

from connectors.simulator.server import FeedSimulator


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m connectors.simulator",
                                     description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tick-interval", type=float, default=30.0,
                        help="seconds of wall time per simulated tick (default 30)")
    args = parser.parse_args()
    simulator = FeedSimulator(port=args.port, host=args.host, seed=args.seed,
                              ttl=30, tick_interval=args.tick_interval)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with simulator:
        print(f"feed simulator on {simulator.url} (seed {args.seed})", flush=True)
        stop.wait()
    print("feed simulator stopped", flush=True)


if __name__ == "__main__":
    main()

"""`python -m bench.simserver`: the simulated cluster for the benches, optionally with
`--claims N` pods and single-GPU claims already allocated by one scheduler pass. Same flags as
`python -m simcluster` for the port, kubeconfig and generated nodes.

One difference: TCP_NODELAY on its connections. simcluster's handler writes a response's
headers and body in separate segments, so on a kept-alive connection Nagle's algorithm and the
client's delayed ACK stall every response by ~40 ms; a real API server does not, and the
benches measure the control plane, not that stall."""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from bench.sim_scheduler import add_claims
from simcluster.cluster import SimCluster
from simcluster.scheduler import Scheduler
from simcluster.server import Handler


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simserver")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig-out", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--claims", type=int, default=0)
    parser.add_argument("--scheduler", action="store_true", help="run the scheduler loop")
    args = parser.parse_args()
    Handler.disable_nagle_algorithm = True
    cluster = SimCluster(
        topology={"generate": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node}},
        port=args.port,
        scheduler=args.scheduler,
    )
    done = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    cluster.start()
    try:
        if args.claims:
            add_claims(cluster.store, args.claims, sizes=(1,))
            report = Scheduler(cluster.store).run_once()
            if report.bound != args.claims:
                raise SystemExit(f"expected {args.claims} pods bound, got {report}")
        cluster.write_kubeconfig(args.kubeconfig_out)
        print(f"simcluster serving on {cluster.url}", flush=True)
        done.wait()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

"""`python -m bench.simserver`: the simulated cluster for the benches, optionally with
`--claims N` pods and single-GPU claims already allocated by one scheduler pass. Same flags as
`python -m simcluster` for the port, kubeconfig and generated nodes."""

from __future__ import annotations

import argparse

from bench.sim_scheduler import add_claims
from simcluster.__main__ import serve
from simcluster.cluster import SimCluster
from simcluster.scheduler import Scheduler


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simserver")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig-out", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--claims", type=int, default=0)
    parser.add_argument("--scheduler", action="store_true", help="run the scheduler loop")
    args = parser.parse_args()
    cluster = SimCluster(
        topology={"generate": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node}},
        port=args.port,
        scheduler=args.scheduler,
    )

    def allocate(cluster: SimCluster) -> None:
        if args.claims:
            add_claims(cluster.store, args.claims, sizes=(1,))
            report = Scheduler(cluster.store).run_once()
            if report.bound != args.claims:
                raise SystemExit(f"expected {args.claims} pods bound, got {report}")

    serve(cluster, kubeconfig_out=args.kubeconfig_out, prepare=allocate)


if __name__ == "__main__":
    main()

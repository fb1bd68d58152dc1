"""`python -m simcluster`: serve a simulated cluster until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from simcluster.cluster import SimCluster
from simcluster.features import DEFAULT_VERSION, SUPPORTED_VERSIONS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m simcluster", description=__doc__)
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (0 picks a free one)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--gateway-port",
        type=int,
        help="serve the simulated gateway (port 80 of its Gateways) here (0 picks a free one)",
    )
    parser.add_argument(
        "--topology", help="topology YAML file (nodes, GPU products, device classes)"
    )
    parser.add_argument("--kubeconfig-out", help="write a kubeconfig pointing at this server here")
    parser.add_argument(
        "--persist", help="keep the cluster's objects in this JSON file across restarts"
    )
    parser.add_argument(
        "--nodes", type=int, help="generate this many GPU nodes instead of a topology file"
    )
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per generated node")
    parser.add_argument("--product", help="GPU product name of generated nodes")
    parser.add_argument(
        "--no-scheduler", action="store_true", help="do not run the DRA scheduler loop"
    )
    parser.add_argument(
        "--emulated-version",
        choices=SUPPORTED_VERSIONS,
        default=DEFAULT_VERSION,
        help="Kubernetes version to behave as: /version, kubelets, feature gates' defaults",
    )
    parser.add_argument(
        "--feature-gates",
        type=feature_gates,
        default={},
        metavar="NAME=true|false,...",
        help="turn DRA feature gates on or off from the version's defaults",
    )
    parser.add_argument(
        "--dev-objects",
        action="append",
        default=[],
        metavar="PATH",
        help="apply this YAML file or kustomize directory at start (create or update; repeatable)",
    )
    return parser.parse_args(argv)


def feature_gates(text: str) -> dict[str, bool]:
    """`--feature-gates` as kube components take it: `A=true,B=false`."""
    gates = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = entry.partition("=")
        if value.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"invalid value of {name}: {value!r}")
        gates[name.strip()] = value.lower() == "true"
    return gates


def topology_source(args: argparse.Namespace) -> str | dict[str, Any] | None:
    generate = {
        key: value
        for key, value in (
            ("nodes", args.nodes),
            ("gpus_per_node", args.gpus_per_node),
            ("product", args.product),
        )
        if value is not None
    }
    if generate:
        if args.topology:
            sys.exit("--topology and --nodes/--gpus-per-node/--product are mutually exclusive")
        return {"generate": generate}
    return args.topology


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        cluster = SimCluster(
            topology=topology_source(args),
            port=args.port,
            host=args.host,
            persist_path=args.persist,
            scheduler=not args.no_scheduler,
            emulated_version=args.emulated_version,
            feature_gates=args.feature_gates,
            gateway_port=args.gateway_port,
        )
    except ValueError as exc:
        sys.exit(f"python -m simcluster: {exc}")
    paths = list(args.dev_objects)

    def prepare(started: SimCluster) -> None:
        for path in paths:
            started.apply_manifests(path)

    serve(cluster, kubeconfig_out=args.kubeconfig_out, prepare=prepare if paths else None)


def serve(
    cluster: SimCluster,
    *,
    kubeconfig_out: str | None,
    prepare: Callable[[SimCluster], None] | None = None,
) -> None:
    """Start the cluster, run `prepare` on it, write the kubeconfig (its appearance tells a
    launcher the cluster is ready), print the URL and serve until SIGINT or SIGTERM."""
    done = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    cluster.start()
    try:
        if prepare is not None:
            prepare(cluster)
        if kubeconfig_out:
            cluster.write_kubeconfig(kubeconfig_out)
        print(f"simcluster serving on {cluster.url}", flush=True)
        if cluster.gateway is not None:
            print(f"simcluster gateway serving on {cluster.gateway.url}", flush=True)
        done.wait()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

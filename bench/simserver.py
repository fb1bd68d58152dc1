"""`python -m bench.simserver`: the simulated cluster for the benches, optionally with
`--claims N` pods and single-GPU claims already allocated by one scheduler pass, or `--units N`
units of the control plane (GPUUnit, ResourceClaim and Pod, as provisioning makes them) in
namespace bench-units, allocated and running. Same flags as `python -m simcluster` for the
port, kubeconfig and generated nodes."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from bench.sim_scheduler import add_claims
from runtime import manifests
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
    parser.add_argument("--units", type=int, default=0)
    parser.add_argument("--scheduler", action="store_true", help="run the scheduler loop")
    args = parser.parse_args()
    cluster = SimCluster(
        topology={"generate": {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node}},
        port=args.port,
        scheduler=args.scheduler,
    )

    def allocate(cluster: SimCluster) -> None:
        if args.units:
            add_units(cluster, args.units)
            report = Scheduler(cluster.store).run_once()
            if report.bound != args.units:
                raise SystemExit(f"expected {args.units} pods bound, got {report}")
        if args.claims:
            add_claims(cluster.store, args.claims, sizes=(1,))
            report = Scheduler(cluster.store).run_once()
            if report.bound != args.claims:
                raise SystemExit(f"expected {args.claims} pods bound, got {report}")

    serve(cluster, kubeconfig_out=args.kubeconfig_out, prepare=allocate)


UNIT_NAMESPACE = "bench-units"
UNIT_TENANT = "bench-units"
CRD = Path(__file__).resolve().parent.parent / "k8s" / "gpuunit-crd.yaml"


def unit_contract(index: int) -> manifests.UnitContract:
    """The contract of bench unit `index`: one H100, as bench.harness.make_package sells it."""
    name = f"unit-{index}"
    return manifests.UnitContract(
        name=name,
        namespace=UNIT_NAMESPACE,
        tenant=UNIT_TENANT,
        operation_id=f"op-{index}",
        request_hash="-",
        package_id="bench-h100-1x",
        spec_name="bench.h100.1x",
        image="ghcr.io/example/worker:1.0",
        cpu="1",
        memory="1Gi",
        gpu=1,
        device_class_name="nvidia-h100",
        claim_name=manifests.claim_name_for(name),
        claim_request_name="gpu",
        count=1,
    )


def add_units(cluster: SimCluster, units: int) -> None:
    store = cluster.store
    store.create("customresourcedefinitions", yaml.safe_load(CRD.read_text()), internal=True)
    store.create("namespaces", {"metadata": {"name": UNIT_NAMESPACE}}, internal=True)
    for index in range(units):
        contract = unit_contract(index)
        gpuunit = store.create(
            "gpuunits.runtime.lokiwager.io", manifests.build_gpuunit(contract), internal=True
        )
        owner = gpuunit["metadata"]["uid"]
        claim = manifests.build_resource_claim(contract, owner_uid=owner)
        store.create("resourceclaims", claim, internal=True)
        store.create("pods", manifests.build_pod(contract, owner_uid=owner), internal=True)


if __name__ == "__main__":
    main()

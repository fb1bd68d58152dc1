"""Create API throughput: POST /api/v1/gpu-units with fresh operationIDs (auth, throttle,
validation, idempotency check, quota under the tenant lock, unit + operation + event, enqueue)
and replays of one operationID, each against a bare Django view doing one INSERT. Same gunicorn,
same 8 connections; rounds alternate so drift hits every kind alike. No cluster: nothing
takes the provisioning tasks the creates queue. Prints one JSON line.

`create` spreads the 8 connections over 8 tenants (one API key each), as many customers would;
`create_one_tenant` sends all 8 through one key, where creates queue on that tenant's row lock
(orders of one tenant are serialised so quota, name and operationID checks see each other)."""

from __future__ import annotations

from collections.abc import Callable

from bench import harness

ROUNDS = harness.sized(3, 1)
SECONDS = harness.sized(5.0, 1.0)
WARMUP_SECONDS = harness.sized(1.0, 0.5)
KINDS = ("baseline", "create", "create_one_tenant", "replay")


def main() -> None:
    harness.setup("api_create")
    from django.db import connection

    from bench.views import CREATE_BASELINE_TABLE
    from runtime.models import GPUUnit

    with connection.cursor() as cursor:
        cursor.execute(CREATE_BASELINE_TABLE)
    keys = [harness.make_tenant(f"bench-create-{n}")[1] for n in range(harness.CONCURRENCY)]
    package = harness.make_package()
    body = {"packageID": package.id, "image": "ghcr.io/example/worker:1.0"}
    replay_body = {"operationID": "replayed-op", "name": "replayed", **body}

    def baseline(index: int, worker: int) -> harness.Request:
        return harness.json_request(
            "POST", "/bench/insert", {"operationID": f"b-{index}", "name": f"b-{index}", **body}
        )

    def creates(label: str, *, one_tenant: bool) -> Callable[[int, int], harness.Request]:
        def create(index: int, worker: int) -> harness.Request:
            name = f"{label}-{index}"
            key = keys[0] if one_tenant else keys[worker]
            return harness.json_request(
                "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
            )

        return create

    def replay(index: int, worker: int) -> harness.Request:
        return harness.json_request("POST", "/api/v1/gpu-units", replay_body, keys[0])

    results: dict[str, list[harness.LoadResult]] = {kind: [] for kind in KINDS}
    cpu = {kind: dict.fromkeys(harness.CPU_GROUPS, 0.0) for kind in KINDS}
    with harness.gunicorn() as port:
        harness.run_load(port, replay, concurrency=1, total=1).check(201)
        for round_number in range(ROUNDS):
            harness.log(f"api_create round {round_number + 1}/{ROUNDS}")
            kinds = {
                "baseline": (baseline, baseline, 201),
                "create": (
                    creates(f"w{round_number}", one_tenant=False),
                    creates(f"m{round_number}", one_tenant=False),
                    201,
                ),
                "create_one_tenant": (
                    creates(f"s{round_number}", one_tenant=True),
                    creates(f"t{round_number}", one_tenant=True),
                    201,
                ),
                "replay": (replay, replay, 200),
            }
            for kind, (warm, make, status) in kinds.items():
                harness.run_load(port, warm, duration=WARMUP_SECONDS).check(status)
                before = harness.cpu_seconds(port)
                result = harness.run_load(port, make, duration=SECONDS)
                after = harness.cpu_seconds(port)
                result.check(status)
                results[kind].append(result)
                for group in harness.CPU_GROUPS:
                    cpu[kind][group] += after[group] - before[group]

    def rps(kind: str) -> float:
        return harness.median([r.rps for r in results[kind]])

    figures: dict = {
        "bench": "api_create",
        "server": harness.SERVER_DESCRIPTION,
        "concurrency": harness.CONCURRENCY,
        "rounds": ROUNDS,
        "seconds_per_round": SECONDS,
        "statement_count": "server side: Django execute_wrapper in bench.middleware",
        "cpu": "CPU ms per request by process (psutil), summed over the measured rounds",
    }
    for kind in KINDS:
        figures[f"{kind}_rps"] = round(rps(kind), 1)
    for kind in KINDS[1:]:
        figures[f"{kind}_ratio"] = harness.ratio(rps(kind), rps("baseline"))
    for kind in KINDS:
        merged = harness.LoadResult()
        for result in results[kind]:
            merged.latencies.extend(result.latencies)
            merged.statements.update(result.statements)
        figures[f"{kind}_p50_ms"] = merged.percentile_ms(50)
        figures[f"{kind}_p99_ms"] = merged.percentile_ms(99)
        figures[f"{kind}_statements"] = merged.statements_per_request()
        served = sum(r.requests for r in results[kind])
        figures[f"{kind}_cpu_ms"] = {
            group: round(seconds / served * 1000, 3) for group, seconds in cpu[kind].items()
        }
    figures["units_created"] = GPUUnit.objects.count()
    harness.emit(figures)


if __name__ == "__main__":
    main()

"""A client generated from /api/v1/openapi.json by openapi-python-client (PyPI), used the way a
program would: list offers, launch on one that can launch now, wait for running without
polling (ETag + ?wait=), and release, waiting for the slots to be wiped and the instance
released. `cargo xtask test` generates the client into target/ and runs this against the test
server with a demo fleet of simulated agents. Arguments: base URL, token, project id.
"""

import sys
import time
import uuid

from gpu_cloud_api_client import AuthenticatedClient
from gpu_cloud_api_client.api.catalog import list_offers
from gpu_cloud_api_client.api.instances import get_instance, launch_instance, release_instance
from gpu_cloud_api_client.models import NewInstance

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl client@e2e"


def fail(message):
    print(f"generated client: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def wait_for(client, instance, states, seconds):
    """Long-polls until the instance's projected state is one of `states`."""
    deadline = time.monotonic() + seconds
    etag = None
    while time.monotonic() < deadline:
        if etag is None:
            r = get_instance.sync_detailed(client=client, id=instance)
        else:
            r = get_instance.sync_detailed(client=client, id=instance, wait=20, if_none_match=etag)
        if r.status_code == 304:
            continue
        if r.status_code != 200:
            fail(f"GET /instances/{instance}: {r.status_code} {r.content[:300]!r}")
        etag = r.headers.get("etag")
        detail = r.parsed
        print(f"    {detail.name}: {detail.projected}", file=sys.stderr)
        if detail.projected in states:
            return detail
        if detail.projected in ("failed", "failing"):
            fail(f"{detail.name} failed: {detail.failure}")
    fail(f"{instance} did not reach {states} in {seconds} s")


def main():
    base, token, project = sys.argv[1], sys.argv[2], uuid.UUID(sys.argv[3])
    client = AuthenticatedClient(base_url=base, token=token, timeout=90)

    offers = list_offers.sync(client=client)
    if offers is None or not offers.offers:
        fail("no offers")
    ready = [o for o in offers.offers if o.launchable > 0 and o.gpu_count == 1]
    if not ready:
        fail(f"no 1-GPU offer can launch now: {[(o.sku, o.region, o.launchable) for o in offers.offers]}")
    offer = ready[0]
    print(f"    offer: {offer.sku} in {offer.region}, {offer.launchable} launchable", file=sys.stderr)

    body = NewInstance(
        project=project,
        sku=offer.sku,
        region=offer.region,
        image="ubuntu-24.04-cuda",
        name=f"client-{uuid.uuid4().hex[:8]}",
        ssh_public_keys=[KEY],
    )
    key = str(uuid.uuid4())
    first = launch_instance.sync_detailed(client=client, body=body, idempotency_key=key)
    if first.status_code != 201:
        fail(f"launch: {first.status_code} {first.content[:400]!r}")
    again = launch_instance.sync_detailed(client=client, body=body, idempotency_key=key)
    if again.status_code != 201 or again.parsed.id != first.parsed.id:
        fail("a retry with the same Idempotency-Key launched something else")
    instance = first.parsed.id

    running = wait_for(client, instance, ("running",), 180)
    if not running.ssh or not running.ssh.startswith("ssh "):
        fail(f"running without an SSH command: {running.ssh!r}")
    print(f"    connect: {running.ssh}", file=sys.stderr)

    released = release_instance.sync_detailed(client=client, id=instance)
    if released.status_code != 202:
        fail(f"release: {released.status_code} {released.content[:300]!r}")
    done = wait_for(client, instance, ("released",), 180)
    if len(done.certificates) == 0:
        fail("released without a cleanup certificate")
    print(
        f"generated client: offers, launch (idempotent), wait for running, release: ok "
        f"({len(done.certificates)} slot(s) wiped and verified)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()

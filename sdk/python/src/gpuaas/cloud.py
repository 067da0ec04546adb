"""``Cloud``: the API as a Python program uses it.

The calls themselves are the generated layer's (``gpuaas._generated``, made from the API's
OpenAPI document by openapi-python-client); this adds what generated code leaves to every
caller: refusals raised as typed errors, retries on 429 and on a 503 where repeating is safe,
an idempotency key made for each create, lists as iterators over every page, and waits.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from . import errors
from ._generated import AuthenticatedClient
from ._generated.api.catalog import list_offers, list_storage_prices
from ._generated.api.clusters import (
    get_cluster,
    get_cluster_topology,
    launch_cluster,
    list_clusters,
    release_cluster,
)
from ._generated.api.instances import (
    get_instance,
    launch_instance,
    list_instances,
    release_instance,
    start_instance,
    stop_instance,
)
from ._generated.api.volumes import (
    attach_volume,
    create_volume,
    delete_volume,
    detach_volume,
    get_volume,
    list_volumes,
)
from ._generated.models import (
    AllocationDetail,
    AllocationSummary,
    Attach,
    Cluster,
    NewCluster,
    NewClusterTags,
    NewInstance,
    NewInstanceTags,
    NewVolume,
    Offer,
    StoragePrice,
    Volume,
)
from ._generated.types import UNSET
from ._retry import RetryingTransport

T = TypeVar("T")

# The states an instance can wait in, as the API projects them.
_ENDED = ("released", "failed")


class Cloud:
    """A session with one deployment's API, as one token.

    ``api`` is the API's base URL (``https://portal.example/api/v1``) and ``token`` an API token
    (``gpk_…``); each defaults to the ``GPUAAS_API`` / ``GPUAAS_TOKEN`` environment variable.
    """

    def __init__(
        self,
        api: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 90.0,
        max_retries: int = 5,
    ) -> None:
        api = api or os.environ.get("GPUAAS_API")
        token = token or os.environ.get("GPUAAS_TOKEN")
        if not api:
            raise ValueError("no API address: pass api= or set GPUAAS_API")
        if not token:
            raise ValueError("no token: pass token= or set GPUAAS_TOKEN")
        self._transport = RetryingTransport(max_retries=max_retries)
        self._client = AuthenticatedClient(
            base_url=api.rstrip("/"),
            token=token,
            timeout=httpx.Timeout(timeout),
            httpx_args={"transport": self._transport},
        )

    @property
    def retries(self) -> int:
        """How many times a call was sent again (after a 429, say) since this session began."""
        return self._transport.retries

    def close(self) -> None:
        self._client.get_httpx_client().close()

    def __enter__(self) -> Cloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The catalog.

    def offers(self, region: str | None = None, gpu_model: str | None = None) -> list[Offer]:
        """What can be launched, per SKU and region, with how many could launch now."""
        r = list_offers.sync_detailed(
            client=self._client, region=_opt(region), gpu_model=_opt(gpu_model)
        )
        return _ok(r).offers

    def storage_prices(self) -> list[StoragePrice]:
        """Each region's price per GiB-month; a region not listed sells no volumes."""
        return _ok(list_storage_prices.sync_detailed(client=self._client)).prices

    # Instances.

    def launch(
        self,
        *,
        sku: str,
        image: str,
        name: str,
        ssh_public_keys: list[str] | None = None,
        project: str | uuid.UUID | None = None,
        region: str | None = None,
        version: str | None = None,
        lifetime_hours: int | None = None,
        published_ports: list[int] | None = None,
        tags: dict[str, str] | None = None,
        user_data: str | None = None,
        volumes: list[str | uuid.UUID] | None = None,
        idempotency_key: str | None = None,
    ) -> AllocationDetail:
        """Launches an instance. One ``idempotency_key`` is one intended launch: the same key
        again (this client's own retries use it) answers the same instance. Made here when not
        given. Raises ``NoCapacity`` when nothing fits (try another region or SKU)."""
        body = NewInstance(
            sku=sku,
            image=image,
            name=name,
            project=_uuid(project),
            region=_opt(region),
            version=_opt(version),
            lifetime_hours=_opt(lifetime_hours),
            published_ports=_opt(published_ports),
            ssh_public_keys=_opt(ssh_public_keys),
            tags=NewInstanceTags.from_dict(tags) if tags else UNSET,
            user_data=_opt(user_data),
            volumes=[_uuid(v) for v in volumes] if volumes else UNSET,
        )
        key = idempotency_key or str(uuid.uuid4())
        return _ok(
            launch_instance.sync_detailed(client=self._client, body=body, idempotency_key=key)
        )

    def instance(self, id: str | uuid.UUID) -> AllocationDetail:
        return _ok(get_instance.sync_detailed(_uuid(id), client=self._client))

    def instances(
        self,
        *,
        project: str | uuid.UUID | None = None,
        state: str | None = None,
        tag: str | None = None,
        page_size: int = 50,
    ) -> Iterator[AllocationSummary]:
        """Every instance the token reaches (or the project's), newest first, fetched a page
        at a time as the iteration goes. ``state`` is ``active`` or one state; ``tag`` is
        ``key=value``."""
        cursor = UNSET
        while True:
            page = _ok(
                list_instances.sync_detailed(
                    client=self._client,
                    project=_uuid(project),
                    state=_opt(state),
                    tag=_opt(tag),
                    cursor=cursor,
                    limit=page_size,
                )
            )
            yield from page.instances
            if not isinstance(page.next_cursor, str):
                return
            cursor = page.next_cursor

    def wait_until_running(
        self, id: str | uuid.UUID, timeout: float = 600.0
    ) -> AllocationDetail:
        """Waits, without polling, until the instance runs; its SSH endpoint is then set.
        Raises ``Failed`` if it ended instead, ``Timeout`` if ``timeout`` ran out."""
        detail = self._wait(id, ("running",), timeout)
        if detail.projected != "running":
            raise errors.Failed(f"{detail.name} did not run: {_text(detail.failure)}")
        return detail

    def release(self, id: str | uuid.UUID) -> AllocationDetail:
        """Asks for the release (its slots are wiped, then it is ``released``). Releasing
        again answers the same."""
        return _ok(release_instance.sync_detailed(_uuid(id), client=self._client))

    def wait_until_released(
        self, id: str | uuid.UUID, timeout: float = 600.0
    ) -> AllocationDetail:
        return self._wait(id, ("released",), timeout)

    def stop(self, id: str | uuid.UUID) -> AllocationDetail:
        """Asks for a stop: the disk is saved (and billed as storage), the GPUs released.
        Stopping again answers the same."""
        return _ok(stop_instance.sync_detailed(_uuid(id), client=self._client))

    def wait_until_stopped(
        self, id: str | uuid.UUID, timeout: float = 600.0
    ) -> AllocationDetail:
        """Waits until the instance is stopped; raises ``Failed`` if it ended instead."""
        detail = self._wait(id, ("stopped",), timeout)
        if detail.projected != "stopped":
            raise errors.Failed(f"{detail.name} did not stop: {_text(detail.failure)}")
        return detail

    def start(self, id: str | uuid.UUID) -> AllocationDetail:
        """Starts a stopped instance on its saved disk, under the same id; ``NoCapacity``
        when its region has no room for its SKU now (it stays stopped). Then
        ``wait_until_running``."""
        return _ok(start_instance.sync_detailed(_uuid(id), client=self._client))

    def _wait(self, id: str | uuid.UUID, states: tuple[str, ...], timeout: float) -> Any:
        """Long-polls `GET /instances/{id}?wait=` with the last ETag until the projected
        state is one of `states` (or an end)."""
        deadline = time.monotonic() + timeout
        etag = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.Timeout(f"instance {id} did not reach {states} in {timeout} s")
            if etag is None:
                r = get_instance.sync_detailed(_uuid(id), client=self._client)
            else:
                r = get_instance.sync_detailed(
                    _uuid(id),
                    client=self._client,
                    wait=max(1, min(30, int(left))),
                    if_none_match=etag,
                )
            if r.status_code == 304:
                continue
            detail = _ok(r)
            etag = r.headers.get("etag")
            if detail.projected in states or detail.projected in _ENDED:
                return detail

    # Clusters.

    def launch_cluster(
        self,
        *,
        sku: str,
        image: str,
        name: str,
        members: int,
        locality: str = "leaf",
        locality_required: bool = False,
        ssh_public_keys: list[str] | None = None,
        project: str | uuid.UUID | None = None,
        region: str | None = None,
        version: str | None = None,
        lifetime_hours: int | None = None,
        tags: dict[str, str] | None = None,
        user_data: str | None = None,
        idempotency_key: str | None = None,
    ) -> Cluster:
        """Launches ``members`` instances of one SKU on one fabric, all or none: within
        ``locality`` (``leaf``, ``spine`` or ``fabric``), or wider when it is only preferred.
        Members are ``<name>-1`` … and boot with a hostfile, ``/etc/hosts`` names and a key
        pair for each other. Raises ``NoCapacity`` with what would fit when nothing does."""
        body = NewCluster(
            sku=sku,
            image=image,
            name=name,
            members=members,
            locality=locality,
            locality_required=locality_required,
            project=_uuid(project),
            region=_opt(region),
            version=_opt(version),
            lifetime_hours=_opt(lifetime_hours),
            ssh_public_keys=_opt(ssh_public_keys),
            tags=NewClusterTags.from_dict(tags) if tags else UNSET,
            user_data=_opt(user_data),
        )
        key = idempotency_key or str(uuid.uuid4())
        return _ok(launch_cluster.sync_detailed(client=self._client, body=body, idempotency_key=key))

    def cluster(self, id: str | uuid.UUID) -> Cluster:
        """The cluster with each member's leaf, spine, state, SSH command and private address."""
        return _ok(get_cluster.sync_detailed(_uuid(id), client=self._client))

    def clusters(self, project: str | uuid.UUID | None = None) -> list[Cluster]:
        return _ok(list_clusters.sync_detailed(client=self._client, project=_uuid(project))).clusters

    def wait_until_cluster_running(
        self, id: str | uuid.UUID, timeout: float = 900.0, every: float = 1.0
    ) -> Cluster:
        """Reads the cluster until every member runs. Raises ``Failed`` if it is being released
        instead (a member failed to come up takes the others with it), ``Timeout`` if
        ``timeout`` ran out."""
        def failed(c: Cluster) -> str | None:
            if c.state in ("releasing", "released", "failed"):
                return f"cluster {c.name} is {c.state}: {_text(c.failure)}"
            return None

        return _poll(
            lambda: self.cluster(id), lambda c: c.state, "running", failed,
            f"cluster {id}", timeout, every,
        )

    def release_cluster(self, id: str | uuid.UUID) -> Cluster:
        """Releases every member. Releasing again is the same release."""
        return _ok(release_cluster.sync_detailed(_uuid(id), client=self._client))

    def cluster_topology(self, id: str | uuid.UUID, format: str = "slurm") -> str:
        """``slurm``: a ``topology.conf`` for the tenant's own Slurm; ``hosts``: ``/etc/hosts``
        lines naming each member at its private address."""
        return _ok(
            get_cluster_topology.sync_detailed(_uuid(id), client=self._client, format_=format)
        )

    # Volumes.

    def create_volume(
        self,
        *,
        name: str,
        region: str | None = None,
        size_gib: int | None = None,
        project: str | uuid.UUID | None = None,
        snapshot: str | uuid.UUID | None = None,
        idempotency_key: str | None = None,
    ) -> Volume:
        """Makes a volume (``creating``, then ``available``); from a snapshot, its region and
        size default to the snapshot's."""
        body = NewVolume(
            name=name,
            project=_uuid(project),
            region=region if region is not None else UNSET,
            size_gib=_opt(size_gib),
            snapshot=_uuid(snapshot),
        )
        key = idempotency_key or str(uuid.uuid4())
        return _ok(create_volume.sync_detailed(client=self._client, body=body, idempotency_key=key))

    def volume(self, id: str | uuid.UUID) -> Volume:
        return _ok(get_volume.sync_detailed(_uuid(id), client=self._client))

    def volumes(self, project: str | uuid.UUID | None = None) -> list[Volume]:
        return _ok(list_volumes.sync_detailed(client=self._client, project=_uuid(project))).volumes

    def attach_volume(self, id: str | uuid.UUID, instance: str | uuid.UUID) -> Volume:
        """Attaches to a running instance of the volume's project and region (``attaching``,
        then ``in_use``)."""
        body = Attach(instance=_uuid(instance))
        return _ok(attach_volume.sync_detailed(_uuid(id), client=self._client, body=body))

    def detach_volume(self, id: str | uuid.UUID) -> Volume:
        return _ok(detach_volume.sync_detailed(_uuid(id), client=self._client))

    def delete_volume(self, id: str | uuid.UUID) -> None:
        """Erases and deletes it; refused (``Conflict``) while attached or snapshotted."""
        _ok(delete_volume.sync_detailed(_uuid(id), client=self._client))

    def wait_for_volume(
        self, id: str | uuid.UUID, state: str, timeout: float = 120.0, every: float = 0.5
    ) -> Volume:
        """Reads the volume until it is in ``state``; raises ``Failed`` on ``error``."""
        def failed(v: Volume) -> str | None:
            return f"volume {v.name}: {_text(v.error)}" if _state(v) == "error" else None

        return _poll(lambda: self.volume(id), _state, state, failed, f"volume {id}", timeout, every)


def _poll(
    read: Callable[[], T],
    state_of: Callable[[T], str],
    want: str,
    failed: Callable[[T], str | None],
    what: str,
    timeout: float,
    every: float,
) -> T:
    """Reads until the state is ``want``; raises ``Failed`` with what ``failed`` says, or
    ``Timeout`` once ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        thing = read()
        now = state_of(thing)
        if now == want:
            return thing
        reason = failed(thing)
        if reason is not None:
            raise errors.Failed(reason)
        if time.monotonic() > deadline:
            raise errors.Timeout(f"{what} is {now}, not {want}, after {timeout} s")
        time.sleep(every)


def _state(v: Volume) -> str:
    return str(v.state.value if hasattr(v.state, "value") else v.state)


def _opt(value: Any) -> Any:
    return UNSET if value is None else value


def _uuid(value: str | uuid.UUID | None) -> Any:
    if value is None:
        return UNSET
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "no reason given"


def _ok(response: Any) -> Any:
    """The parsed answer of a 2xx response; the typed error of any other."""
    if 200 <= response.status_code < 300:
        return response.parsed
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    raise errors.from_response(int(response.status_code), body)

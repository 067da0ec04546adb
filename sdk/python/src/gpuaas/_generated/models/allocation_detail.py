from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID
import datetime

if TYPE_CHECKING:
  from ..models.b_tree_map import BTreeMap
  from ..models.certificate import Certificate
  from ..models.gpu_health_notice import GpuHealthNotice
  from ..models.gpu_utilisation import GpuUtilisation
  from ..models.money import Money
  from ..models.phase import Phase
  from ..models.port_address import PortAddress
  from ..models.ssh_endpoint import SshEndpoint
  from ..models.stopped_disk import StoppedDisk
  from ..models.transition import Transition





T = TypeVar("T", bound="AllocationDetail")



@_attrs_define
class AllocationDetail:
    """ An allocation's page: what it is, where, its state on both sides, how to reach it, and
    its history.

        Attributes:
            can_release (bool): Whether the caller may release it now.
            canonical_name (str):
            certificates (list[Certificate]):
            created_at (datetime.datetime):
            desired_state (str):
            fee_per_hour (Money): Integer minor units (cents) of a currency.
            gpu_count (int):
            gpu_health (list[GpuHealthNotice]): GPU health events on its GPUs since it was placed, newest first.
            id (UUID): A project's lease of slots or of a whole node.
            image (str): The listing and version it was launched with, e.g. "PyTorch 2.5".
            listing (str): The listing's slug (its marketplace page).
            name (str):
            node (str):
            observed_state (str):
            phases (list[Phase]):
            placement_why (str):
            price_per_hour (Money): Integer minor units (cents) of a currency.
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            projected (str):
            published (list[PortAddress]): The published guest ports, once running.
            region (str):
            shape (str):
            sku (str):
            slot_indexes (list[int]):
            state (str):
            tags (BTreeMap):
            transitions (list[Transition]):
            can_start (bool | Unset): Whether the caller may start it now (it is stopped).
            can_stop (bool | Unset): Whether the caller may stop it now.
            cost_so_far (Money | None | Unset):
            execution (None | str | Unset): The current (or last) task and its last phase.
            expires_at (datetime.datetime | None | Unset):
            failure (None | str | Unset):
            gpu_utilisation (GpuUtilisation | None | Unset):
            ran_for_s (int | None | Unset): How long it has run (until its release, or until now), in seconds.
            ran_until (datetime.datetime | None | Unset): When it stopped costing: its release. None while it runs.
            running_since (datetime.datetime | None | Unset): When it started running (and so costing), if it has.
            ssh (None | str | Unset): `ssh -p port user@host`, once running: [`SshEndpoint::command`] of `ssh_endpoint`.
            ssh_endpoint (None | SshEndpoint | Unset):
            stop_keeps (None | StoppedDisk | Unset):
            stopped_disk (None | StoppedDisk | Unset):
     """

    can_release: bool
    canonical_name: str
    certificates: list[Certificate]
    created_at: datetime.datetime
    desired_state: str
    fee_per_hour: Money
    gpu_count: int
    gpu_health: list[GpuHealthNotice]
    id: UUID
    image: str
    listing: str
    name: str
    node: str
    observed_state: str
    phases: list[Phase]
    placement_why: str
    price_per_hour: Money
    project_id: UUID
    projected: str
    published: list[PortAddress]
    region: str
    shape: str
    sku: str
    slot_indexes: list[int]
    state: str
    tags: BTreeMap
    transitions: list[Transition]
    can_start: bool | Unset = UNSET
    can_stop: bool | Unset = UNSET
    cost_so_far: Money | None | Unset = UNSET
    execution: None | str | Unset = UNSET
    expires_at: datetime.datetime | None | Unset = UNSET
    failure: None | str | Unset = UNSET
    gpu_utilisation: GpuUtilisation | None | Unset = UNSET
    ran_for_s: int | None | Unset = UNSET
    ran_until: datetime.datetime | None | Unset = UNSET
    running_since: datetime.datetime | None | Unset = UNSET
    ssh: None | str | Unset = UNSET
    ssh_endpoint: None | SshEndpoint | Unset = UNSET
    stop_keeps: None | StoppedDisk | Unset = UNSET
    stopped_disk: None | StoppedDisk | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.b_tree_map import BTreeMap # noqa: PLC0415
        from ..models.certificate import Certificate # noqa: PLC0415
        from ..models.gpu_health_notice import GpuHealthNotice # noqa: PLC0415
        from ..models.gpu_utilisation import GpuUtilisation # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.phase import Phase # noqa: PLC0415
        from ..models.port_address import PortAddress # noqa: PLC0415
        from ..models.ssh_endpoint import SshEndpoint # noqa: PLC0415
        from ..models.stopped_disk import StoppedDisk # noqa: PLC0415
        from ..models.transition import Transition # noqa: PLC0415
        can_release = self.can_release

        canonical_name = self.canonical_name

        certificates = []
        for certificates_item_data in self.certificates:
            certificates_item = certificates_item_data.to_dict()
            certificates.append(certificates_item)



        created_at = self.created_at.isoformat()

        desired_state = self.desired_state

        fee_per_hour = self.fee_per_hour.to_dict()

        gpu_count = self.gpu_count

        gpu_health = []
        for gpu_health_item_data in self.gpu_health:
            gpu_health_item = gpu_health_item_data.to_dict()
            gpu_health.append(gpu_health_item)



        id = str(self.id)

        image = self.image

        listing = self.listing

        name = self.name

        node = self.node

        observed_state = self.observed_state

        phases = []
        for phases_item_data in self.phases:
            phases_item = phases_item_data.to_dict()
            phases.append(phases_item)



        placement_why = self.placement_why

        price_per_hour = self.price_per_hour.to_dict()

        project_id = str(self.project_id)

        projected = self.projected

        published = []
        for published_item_data in self.published:
            published_item = published_item_data.to_dict()
            published.append(published_item)



        region = self.region

        shape = self.shape

        sku = self.sku

        slot_indexes = self.slot_indexes



        state = self.state

        tags = self.tags.to_dict()

        transitions = []
        for transitions_item_data in self.transitions:
            transitions_item = transitions_item_data.to_dict()
            transitions.append(transitions_item)



        can_start = self.can_start

        can_stop = self.can_stop

        cost_so_far: dict[str, Any] | None | Unset
        if isinstance(self.cost_so_far, Unset):
            cost_so_far = UNSET
        elif isinstance(self.cost_so_far, Money):
            cost_so_far = self.cost_so_far.to_dict()
        else:
            cost_so_far = self.cost_so_far

        execution: None | str | Unset
        if isinstance(self.execution, Unset):
            execution = UNSET
        else:
            execution = self.execution

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        elif isinstance(self.expires_at, datetime.datetime):
            expires_at = self.expires_at.isoformat()
        else:
            expires_at = self.expires_at

        failure: None | str | Unset
        if isinstance(self.failure, Unset):
            failure = UNSET
        else:
            failure = self.failure

        gpu_utilisation: dict[str, Any] | None | Unset
        if isinstance(self.gpu_utilisation, Unset):
            gpu_utilisation = UNSET
        elif isinstance(self.gpu_utilisation, GpuUtilisation):
            gpu_utilisation = self.gpu_utilisation.to_dict()
        else:
            gpu_utilisation = self.gpu_utilisation

        ran_for_s: int | None | Unset
        if isinstance(self.ran_for_s, Unset):
            ran_for_s = UNSET
        else:
            ran_for_s = self.ran_for_s

        ran_until: None | str | Unset
        if isinstance(self.ran_until, Unset):
            ran_until = UNSET
        elif isinstance(self.ran_until, datetime.datetime):
            ran_until = self.ran_until.isoformat()
        else:
            ran_until = self.ran_until

        running_since: None | str | Unset
        if isinstance(self.running_since, Unset):
            running_since = UNSET
        elif isinstance(self.running_since, datetime.datetime):
            running_since = self.running_since.isoformat()
        else:
            running_since = self.running_since

        ssh: None | str | Unset
        if isinstance(self.ssh, Unset):
            ssh = UNSET
        else:
            ssh = self.ssh

        ssh_endpoint: dict[str, Any] | None | Unset
        if isinstance(self.ssh_endpoint, Unset):
            ssh_endpoint = UNSET
        elif isinstance(self.ssh_endpoint, SshEndpoint):
            ssh_endpoint = self.ssh_endpoint.to_dict()
        else:
            ssh_endpoint = self.ssh_endpoint

        stop_keeps: dict[str, Any] | None | Unset
        if isinstance(self.stop_keeps, Unset):
            stop_keeps = UNSET
        elif isinstance(self.stop_keeps, StoppedDisk):
            stop_keeps = self.stop_keeps.to_dict()
        else:
            stop_keeps = self.stop_keeps

        stopped_disk: dict[str, Any] | None | Unset
        if isinstance(self.stopped_disk, Unset):
            stopped_disk = UNSET
        elif isinstance(self.stopped_disk, StoppedDisk):
            stopped_disk = self.stopped_disk.to_dict()
        else:
            stopped_disk = self.stopped_disk


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "can_release": can_release,
            "canonical_name": canonical_name,
            "certificates": certificates,
            "created_at": created_at,
            "desired_state": desired_state,
            "fee_per_hour": fee_per_hour,
            "gpu_count": gpu_count,
            "gpu_health": gpu_health,
            "id": id,
            "image": image,
            "listing": listing,
            "name": name,
            "node": node,
            "observed_state": observed_state,
            "phases": phases,
            "placement_why": placement_why,
            "price_per_hour": price_per_hour,
            "project_id": project_id,
            "projected": projected,
            "published": published,
            "region": region,
            "shape": shape,
            "sku": sku,
            "slot_indexes": slot_indexes,
            "state": state,
            "tags": tags,
            "transitions": transitions,
        })
        if can_start is not UNSET:
            field_dict["can_start"] = can_start
        if can_stop is not UNSET:
            field_dict["can_stop"] = can_stop
        if cost_so_far is not UNSET:
            field_dict["cost_so_far"] = cost_so_far
        if execution is not UNSET:
            field_dict["execution"] = execution
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at
        if failure is not UNSET:
            field_dict["failure"] = failure
        if gpu_utilisation is not UNSET:
            field_dict["gpu_utilisation"] = gpu_utilisation
        if ran_for_s is not UNSET:
            field_dict["ran_for_s"] = ran_for_s
        if ran_until is not UNSET:
            field_dict["ran_until"] = ran_until
        if running_since is not UNSET:
            field_dict["running_since"] = running_since
        if ssh is not UNSET:
            field_dict["ssh"] = ssh
        if ssh_endpoint is not UNSET:
            field_dict["ssh_endpoint"] = ssh_endpoint
        if stop_keeps is not UNSET:
            field_dict["stop_keeps"] = stop_keeps
        if stopped_disk is not UNSET:
            field_dict["stopped_disk"] = stopped_disk

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.b_tree_map import BTreeMap # noqa: PLC0415
        from ..models.certificate import Certificate # noqa: PLC0415
        from ..models.gpu_health_notice import GpuHealthNotice # noqa: PLC0415
        from ..models.gpu_utilisation import GpuUtilisation # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.phase import Phase # noqa: PLC0415
        from ..models.port_address import PortAddress # noqa: PLC0415
        from ..models.ssh_endpoint import SshEndpoint # noqa: PLC0415
        from ..models.stopped_disk import StoppedDisk # noqa: PLC0415
        from ..models.transition import Transition # noqa: PLC0415
        d = dict(src_dict)
        can_release = d.pop("can_release")

        canonical_name = d.pop("canonical_name")

        certificates = []
        _certificates = d.pop("certificates")
        for certificates_item_data in (_certificates):
            certificates_item = Certificate.from_dict(certificates_item_data)



            certificates.append(certificates_item)


        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        desired_state = d.pop("desired_state")

        fee_per_hour = Money.from_dict(d.pop("fee_per_hour"))




        gpu_count = d.pop("gpu_count")

        gpu_health = []
        _gpu_health = d.pop("gpu_health")
        for gpu_health_item_data in (_gpu_health):
            gpu_health_item = GpuHealthNotice.from_dict(gpu_health_item_data)



            gpu_health.append(gpu_health_item)


        id = UUID(d.pop("id"))




        image = d.pop("image")

        listing = d.pop("listing")

        name = d.pop("name")

        node = d.pop("node")

        observed_state = d.pop("observed_state")

        phases = []
        _phases = d.pop("phases")
        for phases_item_data in (_phases):
            phases_item = Phase.from_dict(phases_item_data)



            phases.append(phases_item)


        placement_why = d.pop("placement_why")

        price_per_hour = Money.from_dict(d.pop("price_per_hour"))




        project_id = UUID(d.pop("project_id"))




        projected = d.pop("projected")

        published = []
        _published = d.pop("published")
        for published_item_data in (_published):
            published_item = PortAddress.from_dict(published_item_data)



            published.append(published_item)


        region = d.pop("region")

        shape = d.pop("shape")

        sku = d.pop("sku")

        slot_indexes = cast(list[int], d.pop("slot_indexes"))


        state = d.pop("state")

        tags = BTreeMap.from_dict(d.pop("tags"))




        transitions = []
        _transitions = d.pop("transitions")
        for transitions_item_data in (_transitions):
            transitions_item = Transition.from_dict(transitions_item_data)



            transitions.append(transitions_item)


        can_start = d.pop("can_start", UNSET)

        can_stop = d.pop("can_stop", UNSET)

        def _parse_cost_so_far(data: object) -> Money | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                cost_so_far_type_1 = Money.from_dict(data)



                return cost_so_far_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Money | None | Unset, data)

        cost_so_far = _parse_cost_so_far(d.pop("cost_so_far", UNSET))


        def _parse_execution(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        execution = _parse_execution(d.pop("execution", UNSET))


        def _parse_expires_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                expires_at_type_0 = datetime.datetime.fromisoformat(data)



                return expires_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        expires_at = _parse_expires_at(d.pop("expires_at", UNSET))


        def _parse_failure(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        failure = _parse_failure(d.pop("failure", UNSET))


        def _parse_gpu_utilisation(data: object) -> GpuUtilisation | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                gpu_utilisation_type_1 = GpuUtilisation.from_dict(data)



                return gpu_utilisation_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(GpuUtilisation | None | Unset, data)

        gpu_utilisation = _parse_gpu_utilisation(d.pop("gpu_utilisation", UNSET))


        def _parse_ran_for_s(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        ran_for_s = _parse_ran_for_s(d.pop("ran_for_s", UNSET))


        def _parse_ran_until(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                ran_until_type_0 = datetime.datetime.fromisoformat(data)



                return ran_until_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        ran_until = _parse_ran_until(d.pop("ran_until", UNSET))


        def _parse_running_since(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                running_since_type_0 = datetime.datetime.fromisoformat(data)



                return running_since_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        running_since = _parse_running_since(d.pop("running_since", UNSET))


        def _parse_ssh(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        ssh = _parse_ssh(d.pop("ssh", UNSET))


        def _parse_ssh_endpoint(data: object) -> None | SshEndpoint | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                ssh_endpoint_type_1 = SshEndpoint.from_dict(data)



                return ssh_endpoint_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | SshEndpoint | Unset, data)

        ssh_endpoint = _parse_ssh_endpoint(d.pop("ssh_endpoint", UNSET))


        def _parse_stop_keeps(data: object) -> None | StoppedDisk | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                stop_keeps_type_1 = StoppedDisk.from_dict(data)



                return stop_keeps_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StoppedDisk | Unset, data)

        stop_keeps = _parse_stop_keeps(d.pop("stop_keeps", UNSET))


        def _parse_stopped_disk(data: object) -> None | StoppedDisk | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                stopped_disk_type_1 = StoppedDisk.from_dict(data)



                return stopped_disk_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | StoppedDisk | Unset, data)

        stopped_disk = _parse_stopped_disk(d.pop("stopped_disk", UNSET))


        allocation_detail = cls(
            can_release=can_release,
            canonical_name=canonical_name,
            certificates=certificates,
            created_at=created_at,
            desired_state=desired_state,
            fee_per_hour=fee_per_hour,
            gpu_count=gpu_count,
            gpu_health=gpu_health,
            id=id,
            image=image,
            listing=listing,
            name=name,
            node=node,
            observed_state=observed_state,
            phases=phases,
            placement_why=placement_why,
            price_per_hour=price_per_hour,
            project_id=project_id,
            projected=projected,
            published=published,
            region=region,
            shape=shape,
            sku=sku,
            slot_indexes=slot_indexes,
            state=state,
            tags=tags,
            transitions=transitions,
            can_start=can_start,
            can_stop=can_stop,
            cost_so_far=cost_so_far,
            execution=execution,
            expires_at=expires_at,
            failure=failure,
            gpu_utilisation=gpu_utilisation,
            ran_for_s=ran_for_s,
            ran_until=ran_until,
            running_since=running_since,
            ssh=ssh,
            ssh_endpoint=ssh_endpoint,
            stop_keeps=stop_keeps,
            stopped_disk=stopped_disk,
        )


        allocation_detail.additional_properties = d
        return allocation_detail

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties

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
  from ..models.money import Money
  from ..models.port_address import PortAddress
  from ..models.ssh_endpoint import SshEndpoint





T = TypeVar("T", bound="AllocationSummary")



@_attrs_define
class AllocationSummary:
    """ One allocation in a project's list.

        Attributes:
            created_at (datetime.datetime):
            gpu_count (int):
            id (UUID): A project's lease of slots or of a whole node.
            name (str):
            price_per_hour (Money): Integer minor units (cents) of a currency.
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            projected (str): What the UI shows: the state, unless desired and actual disagree ("releasing",
                "failing", "failed").
            published (list[PortAddress]): The published guest ports, once running.
            region (str):
            sku (str):
            state (str): The lifecycle state.
            tags (BTreeMap):
            cost_so_far (Money | None | Unset):
            expires_at (datetime.datetime | None | Unset): When it will be released by itself, if it was launched for a
                number of hours.
            ssh (None | str | Unset): `ssh -p port user@host`, once running: [`SshEndpoint::command`] of `ssh_endpoint`.
            ssh_endpoint (None | SshEndpoint | Unset):
     """

    created_at: datetime.datetime
    gpu_count: int
    id: UUID
    name: str
    price_per_hour: Money
    project_id: UUID
    projected: str
    published: list[PortAddress]
    region: str
    sku: str
    state: str
    tags: BTreeMap
    cost_so_far: Money | None | Unset = UNSET
    expires_at: datetime.datetime | None | Unset = UNSET
    ssh: None | str | Unset = UNSET
    ssh_endpoint: None | SshEndpoint | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.b_tree_map import BTreeMap # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.port_address import PortAddress # noqa: PLC0415
        from ..models.ssh_endpoint import SshEndpoint # noqa: PLC0415
        created_at = self.created_at.isoformat()

        gpu_count = self.gpu_count

        id = str(self.id)

        name = self.name

        price_per_hour = self.price_per_hour.to_dict()

        project_id = str(self.project_id)

        projected = self.projected

        published = []
        for published_item_data in self.published:
            published_item = published_item_data.to_dict()
            published.append(published_item)



        region = self.region

        sku = self.sku

        state = self.state

        tags = self.tags.to_dict()

        cost_so_far: dict[str, Any] | None | Unset
        if isinstance(self.cost_so_far, Unset):
            cost_so_far = UNSET
        elif isinstance(self.cost_so_far, Money):
            cost_so_far = self.cost_so_far.to_dict()
        else:
            cost_so_far = self.cost_so_far

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        elif isinstance(self.expires_at, datetime.datetime):
            expires_at = self.expires_at.isoformat()
        else:
            expires_at = self.expires_at

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


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "gpu_count": gpu_count,
            "id": id,
            "name": name,
            "price_per_hour": price_per_hour,
            "project_id": project_id,
            "projected": projected,
            "published": published,
            "region": region,
            "sku": sku,
            "state": state,
            "tags": tags,
        })
        if cost_so_far is not UNSET:
            field_dict["cost_so_far"] = cost_so_far
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at
        if ssh is not UNSET:
            field_dict["ssh"] = ssh
        if ssh_endpoint is not UNSET:
            field_dict["ssh_endpoint"] = ssh_endpoint

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.b_tree_map import BTreeMap # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.port_address import PortAddress # noqa: PLC0415
        from ..models.ssh_endpoint import SshEndpoint # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        gpu_count = d.pop("gpu_count")

        id = UUID(d.pop("id"))




        name = d.pop("name")

        price_per_hour = Money.from_dict(d.pop("price_per_hour"))




        project_id = UUID(d.pop("project_id"))




        projected = d.pop("projected")

        published = []
        _published = d.pop("published")
        for published_item_data in (_published):
            published_item = PortAddress.from_dict(published_item_data)



            published.append(published_item)


        region = d.pop("region")

        sku = d.pop("sku")

        state = d.pop("state")

        tags = BTreeMap.from_dict(d.pop("tags"))




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


        allocation_summary = cls(
            created_at=created_at,
            gpu_count=gpu_count,
            id=id,
            name=name,
            price_per_hour=price_per_hour,
            project_id=project_id,
            projected=projected,
            published=published,
            region=region,
            sku=sku,
            state=state,
            tags=tags,
            cost_so_far=cost_so_far,
            expires_at=expires_at,
            ssh=ssh,
            ssh_endpoint=ssh_endpoint,
        )


        allocation_summary.additional_properties = d
        return allocation_summary

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

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
  from ..models.cluster_member import ClusterMember





T = TypeVar("T", bound="Cluster")



@_attrs_define
class Cluster:
    """ A cluster, from its members' states: `provisioning` until every member runs, then
    `running`; `releasing` once its release was asked for (or a member failed), `released`
    when every member is, `failed` when that release began with a member's failure.

        Attributes:
            created_at (datetime.datetime):
            fabric (str):
            id (UUID): Allocations of one SKU placed together within one leaf, spine group or fabric.
            leaves (int): How many leaf switches and spine groups the members span.
            locality (str): `leaf`, `spine` or `fabric`: what was asked.
            locality_required (bool):
            members (list[ClusterMember]):
            name (str):
            placed_within (str): The narrowest of those that holds every member.
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            region (str):
            size (int): How many members.
            sku (str):
            spines (int):
            state (str):
            why (str): Placement's sentence.
            failure (None | str | Unset): Why it failed, when a member did.
     """

    created_at: datetime.datetime
    fabric: str
    id: UUID
    leaves: int
    locality: str
    locality_required: bool
    members: list[ClusterMember]
    name: str
    placed_within: str
    project_id: UUID
    region: str
    size: int
    sku: str
    spines: int
    state: str
    why: str
    failure: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.cluster_member import ClusterMember # noqa: PLC0415
        created_at = self.created_at.isoformat()

        fabric = self.fabric

        id = str(self.id)

        leaves = self.leaves

        locality = self.locality

        locality_required = self.locality_required

        members = []
        for members_item_data in self.members:
            members_item = members_item_data.to_dict()
            members.append(members_item)



        name = self.name

        placed_within = self.placed_within

        project_id = str(self.project_id)

        region = self.region

        size = self.size

        sku = self.sku

        spines = self.spines

        state = self.state

        why = self.why

        failure: None | str | Unset
        if isinstance(self.failure, Unset):
            failure = UNSET
        else:
            failure = self.failure


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "fabric": fabric,
            "id": id,
            "leaves": leaves,
            "locality": locality,
            "locality_required": locality_required,
            "members": members,
            "name": name,
            "placed_within": placed_within,
            "project_id": project_id,
            "region": region,
            "size": size,
            "sku": sku,
            "spines": spines,
            "state": state,
            "why": why,
        })
        if failure is not UNSET:
            field_dict["failure"] = failure

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.cluster_member import ClusterMember # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        fabric = d.pop("fabric")

        id = UUID(d.pop("id"))




        leaves = d.pop("leaves")

        locality = d.pop("locality")

        locality_required = d.pop("locality_required")

        members = []
        _members = d.pop("members")
        for members_item_data in (_members):
            members_item = ClusterMember.from_dict(members_item_data)



            members.append(members_item)


        name = d.pop("name")

        placed_within = d.pop("placed_within")

        project_id = UUID(d.pop("project_id"))




        region = d.pop("region")

        size = d.pop("size")

        sku = d.pop("sku")

        spines = d.pop("spines")

        state = d.pop("state")

        why = d.pop("why")

        def _parse_failure(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        failure = _parse_failure(d.pop("failure", UNSET))


        cluster = cls(
            created_at=created_at,
            fabric=fabric,
            id=id,
            leaves=leaves,
            locality=locality,
            locality_required=locality_required,
            members=members,
            name=name,
            placed_within=placed_within,
            project_id=project_id,
            region=region,
            size=size,
            sku=sku,
            spines=spines,
            state=state,
            why=why,
            failure=failure,
        )


        cluster.additional_properties = d
        return cluster

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID






T = TypeVar("T", bound="ClusterMember")



@_attrs_define
class ClusterMember:
    """ One member: an ordinary allocation (`/api/v1/instances/{id}`), with its place.

        Attributes:
            id (UUID): A project's lease of slots or of a whole node.
            index (int): 1 to the cluster's size.
            leaf (str):
            name (str):
            spine (str):
            state (str):
            private_address (None | str | Unset): Its address on the project's private network (its second NIC), while the
                project
                allows east-west traffic.
            ssh (None | str | Unset): `ssh -p PORT ubuntu@HOST`, once it runs.
     """

    id: UUID
    index: int
    leaf: str
    name: str
    spine: str
    state: str
    private_address: None | str | Unset = UNSET
    ssh: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        id = str(self.id)

        index = self.index

        leaf = self.leaf

        name = self.name

        spine = self.spine

        state = self.state

        private_address: None | str | Unset
        if isinstance(self.private_address, Unset):
            private_address = UNSET
        else:
            private_address = self.private_address

        ssh: None | str | Unset
        if isinstance(self.ssh, Unset):
            ssh = UNSET
        else:
            ssh = self.ssh


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "id": id,
            "index": index,
            "leaf": leaf,
            "name": name,
            "spine": spine,
            "state": state,
        })
        if private_address is not UNSET:
            field_dict["private_address"] = private_address
        if ssh is not UNSET:
            field_dict["ssh"] = ssh

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        id = UUID(d.pop("id"))




        index = d.pop("index")

        leaf = d.pop("leaf")

        name = d.pop("name")

        spine = d.pop("spine")

        state = d.pop("state")

        def _parse_private_address(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        private_address = _parse_private_address(d.pop("private_address", UNSET))


        def _parse_ssh(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        ssh = _parse_ssh(d.pop("ssh", UNSET))


        cluster_member = cls(
            id=id,
            index=index,
            leaf=leaf,
            name=name,
            spine=spine,
            state=state,
            private_address=private_address,
            ssh=ssh,
        )


        cluster_member.additional_properties = d
        return cluster_member

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="SshEndpoint")



@_attrs_define
class SshEndpoint:
    """ Where a tenant connects with SSH, as the platform planned it: the node's approved public
    address, the port it forwards to the guest's 22, and the listing's SSH user. Never text a
    host reported: the database checks each field's form, and `gpuctl ssh` builds its argv from
    these fields, not by splitting [`SshEndpoint::command`].

        Attributes:
            host (str): A DNS name or an IP address.
            port (int):
            user (str):
     """

    host: str
    port: int
    user: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        host = self.host

        port = self.port

        user = self.user


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "host": host,
            "port": port,
            "user": user,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        host = d.pop("host")

        port = d.pop("port")

        user = d.pop("user")

        ssh_endpoint = cls(
            host=host,
            port=port,
            user=user,
        )


        ssh_endpoint.additional_properties = d
        return ssh_endpoint

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.ssh_key import SshKey





T = TypeVar("T", bound="SshKeyList")



@_attrs_define
class SshKeyList:
    """ 
        Attributes:
            ssh_keys (list[SshKey]):
     """

    ssh_keys: list[SshKey]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.ssh_key import SshKey # noqa: PLC0415
        ssh_keys = []
        for ssh_keys_item_data in self.ssh_keys:
            ssh_keys_item = ssh_keys_item_data.to_dict()
            ssh_keys.append(ssh_keys_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "ssh_keys": ssh_keys,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.ssh_key import SshKey # noqa: PLC0415
        d = dict(src_dict)
        ssh_keys = []
        _ssh_keys = d.pop("ssh_keys")
        for ssh_keys_item_data in (_ssh_keys):
            ssh_keys_item = SshKey.from_dict(ssh_keys_item_data)



            ssh_keys.append(ssh_keys_item)


        ssh_key_list = cls(
            ssh_keys=ssh_keys,
        )


        ssh_key_list.additional_properties = d
        return ssh_key_list

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

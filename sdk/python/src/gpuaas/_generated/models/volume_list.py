from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.volume import Volume





T = TypeVar("T", bound="VolumeList")



@_attrs_define
class VolumeList:
    """ 
        Attributes:
            volumes (list[Volume]):
     """

    volumes: list[Volume]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.volume import Volume # noqa: PLC0415
        volumes = []
        for volumes_item_data in self.volumes:
            volumes_item = volumes_item_data.to_dict()
            volumes.append(volumes_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "volumes": volumes,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.volume import Volume # noqa: PLC0415
        d = dict(src_dict)
        volumes = []
        _volumes = d.pop("volumes")
        for volumes_item_data in (_volumes):
            volumes_item = Volume.from_dict(volumes_item_data)



            volumes.append(volumes_item)


        volume_list = cls(
            volumes=volumes,
        )


        volume_list.additional_properties = d
        return volume_list

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

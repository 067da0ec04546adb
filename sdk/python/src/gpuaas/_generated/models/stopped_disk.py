from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="StoppedDisk")



@_attrs_define
class StoppedDisk:
    """ A stopped instance's boot disk, saved on the region's storage.

        Attributes:
            monthly_cost (Money): Integer minor units (cents) of a currency.
            size_gib (int):
     """

    monthly_cost: Money
    size_gib: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        monthly_cost = self.monthly_cost.to_dict()

        size_gib = self.size_gib


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "monthly_cost": monthly_cost,
            "size_gib": size_gib,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        monthly_cost = Money.from_dict(d.pop("monthly_cost"))




        size_gib = d.pop("size_gib")

        stopped_disk = cls(
            monthly_cost=monthly_cost,
            size_gib=size_gib,
        )


        stopped_disk.additional_properties = d
        return stopped_disk

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

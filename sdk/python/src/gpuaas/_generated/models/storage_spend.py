from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="StorageSpend")



@_attrs_define
class StorageSpend:
    """ A tenant's storage this month, beside compute.

        Attributes:
            month_to_date (Money): Integer minor units (cents) of a currency.
            per_month (Money): Integer minor units (cents) of a currency.
            provisioned_gib (int): GiB provisioned now, across the tenant's volumes.
     """

    month_to_date: Money
    per_month: Money
    provisioned_gib: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        month_to_date = self.month_to_date.to_dict()

        per_month = self.per_month.to_dict()

        provisioned_gib = self.provisioned_gib


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "month_to_date": month_to_date,
            "per_month": per_month,
            "provisioned_gib": provisioned_gib,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        month_to_date = Money.from_dict(d.pop("month_to_date"))




        per_month = Money.from_dict(d.pop("per_month"))




        provisioned_gib = d.pop("provisioned_gib")

        storage_spend = cls(
            month_to_date=month_to_date,
            per_month=per_month,
            provisioned_gib=provisioned_gib,
        )


        storage_spend.additional_properties = d
        return storage_spend

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

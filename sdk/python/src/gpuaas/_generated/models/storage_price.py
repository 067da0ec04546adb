from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="StoragePrice")



@_attrs_define
class StoragePrice:
    """ What a GiB of storage costs in a region, per GiB-month of 730 hours, rated per second.

        Attributes:
            currency (str):  Example: USD.
            per_gib_month_micro (int): Micro-units (10^-6 of the currency) per GiB-month: `100000` is 0.10.
            region (str):
     """

    currency: str
    per_gib_month_micro: int
    region: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        currency = self.currency

        per_gib_month_micro = self.per_gib_month_micro

        region = self.region


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "currency": currency,
            "per_gib_month_micro": per_gib_month_micro,
            "region": region,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        currency = d.pop("currency")

        per_gib_month_micro = d.pop("per_gib_month_micro")

        region = d.pop("region")

        storage_price = cls(
            currency=currency,
            per_gib_month_micro=per_gib_month_micro,
            region=region,
        )


        storage_price.additional_properties = d
        return storage_price

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

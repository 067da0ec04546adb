from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="SpendPoint")



@_attrs_define
class SpendPoint:
    """ Rated spend of one project on one SKU on one day.

        Attributes:
            amount_minor (int):
            day (str): `2026-11-03`.
            project (str):
            sku (str):
     """

    amount_minor: int
    day: str
    project: str
    sku: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        amount_minor = self.amount_minor

        day = self.day

        project = self.project

        sku = self.sku


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "amount_minor": amount_minor,
            "day": day,
            "project": project,
            "sku": sku,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        amount_minor = d.pop("amount_minor")

        day = d.pop("day")

        project = d.pop("project")

        sku = d.pop("sku")

        spend_point = cls(
            amount_minor=amount_minor,
            day=day,
            project=project,
            sku=sku,
        )


        spend_point.additional_properties = d
        return spend_point

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

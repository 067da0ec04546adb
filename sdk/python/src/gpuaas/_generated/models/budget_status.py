from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="BudgetStatus")



@_attrs_define
class BudgetStatus:
    """ A budget and how much of it this month has used.

        Attributes:
            alert (str): `ok`, `warning` (≥ 80 %) or `exceeded` (≥ 100 %).
            limit (Money): Integer minor units (cents) of a currency.
            percent (int):
            scope (str): "organization" or the project's slug.
            spent (Money): Integer minor units (cents) of a currency.
     """

    alert: str
    limit: Money
    percent: int
    scope: str
    spent: Money
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        alert = self.alert

        limit = self.limit.to_dict()

        percent = self.percent

        scope = self.scope

        spent = self.spent.to_dict()


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "alert": alert,
            "limit": limit,
            "percent": percent,
            "scope": scope,
            "spent": spent,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        alert = d.pop("alert")

        limit = Money.from_dict(d.pop("limit"))




        percent = d.pop("percent")

        scope = d.pop("scope")

        spent = Money.from_dict(d.pop("spent"))




        budget_status = cls(
            alert=alert,
            limit=limit,
            percent=percent,
            scope=scope,
            spent=spent,
        )


        budget_status.additional_properties = d
        return budget_status

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast
from uuid import UUID

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="ClusterSpend")



@_attrs_define
class ClusterSpend:
    """ What one cluster's members have cost this month: their usage and fees, rated or running.

        Attributes:
            id (UUID): Allocations of one SKU placed together within one leaf, spine group or fabric.
            month_to_date (Money): Integer minor units (cents) of a currency.
            name (str):
            nodes (int): How many members it has (or had).
            project (str): The project's slug.
            released (bool): Its release was asked for: it costs nothing more once its members are gone.
     """

    id: UUID
    month_to_date: Money
    name: str
    nodes: int
    project: str
    released: bool
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        id = str(self.id)

        month_to_date = self.month_to_date.to_dict()

        name = self.name

        nodes = self.nodes

        project = self.project

        released = self.released


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "id": id,
            "month_to_date": month_to_date,
            "name": name,
            "nodes": nodes,
            "project": project,
            "released": released,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        id = UUID(d.pop("id"))




        month_to_date = Money.from_dict(d.pop("month_to_date"))




        name = d.pop("name")

        nodes = d.pop("nodes")

        project = d.pop("project")

        released = d.pop("released")

        cluster_spend = cls(
            id=id,
            month_to_date=month_to_date,
            name=name,
            nodes=nodes,
            project=project,
            released=released,
        )


        cluster_spend.additional_properties = d
        return cluster_spend

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast
import datetime






T = TypeVar("T", bound="GpuHealthNotice")



@_attrs_define
class GpuHealthNotice:
    """ A GPU health event on one of the allocation's GPUs while it held them, as its tenant sees it.

        Attributes:
            detail (str): What the driver reported, e.g. "XID 79: GPU has fallen off the bus."
            observed_at (datetime.datetime):
            out_of_service (bool): Whether the fleet's policy took the GPU out of service for it: nothing new is placed on
                it until an operator has looked.
            slot_index (int): The slot of the GPU (as in `slot_indexes`).
     """

    detail: str
    observed_at: datetime.datetime
    out_of_service: bool
    slot_index: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        detail = self.detail

        observed_at = self.observed_at.isoformat()

        out_of_service = self.out_of_service

        slot_index = self.slot_index


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "detail": detail,
            "observed_at": observed_at,
            "out_of_service": out_of_service,
            "slot_index": slot_index,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        detail = d.pop("detail")

        observed_at = datetime.datetime.fromisoformat(d.pop("observed_at"))




        out_of_service = d.pop("out_of_service")

        slot_index = d.pop("slot_index")

        gpu_health_notice = cls(
            detail=detail,
            observed_at=observed_at,
            out_of_service=out_of_service,
            slot_index=slot_index,
        )


        gpu_health_notice.additional_properties = d
        return gpu_health_notice

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

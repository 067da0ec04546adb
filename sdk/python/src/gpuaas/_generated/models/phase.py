from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="Phase")



@_attrs_define
class Phase:
    """ A phase the node agent reported for one of the allocation's tasks.

        Attributes:
            elapsed_ms (int):
            phase (str):
            status (str):
            task (str):
            detail (None | str | Unset):
     """

    elapsed_ms: int
    phase: str
    status: str
    task: str
    detail: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        elapsed_ms = self.elapsed_ms

        phase = self.phase

        status = self.status

        task = self.task

        detail: None | str | Unset
        if isinstance(self.detail, Unset):
            detail = UNSET
        else:
            detail = self.detail


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "elapsed_ms": elapsed_ms,
            "phase": phase,
            "status": status,
            "task": task,
        })
        if detail is not UNSET:
            field_dict["detail"] = detail

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        elapsed_ms = d.pop("elapsed_ms")

        phase = d.pop("phase")

        status = d.pop("status")

        task = d.pop("task")

        def _parse_detail(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        detail = _parse_detail(d.pop("detail", UNSET))


        phase = cls(
            elapsed_ms=elapsed_ms,
            phase=phase,
            status=status,
            task=task,
            detail=detail,
        )


        phase.additional_properties = d
        return phase

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="Resize")



@_attrs_define
class Resize:
    """ A new size.

        Attributes:
            size_gib (int): Larger than now (volumes only grow), at most 16384.
     """

    size_gib: int





    def to_dict(self) -> dict[str, Any]:
        size_gib = self.size_gib


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "size_gib": size_gib,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        size_gib = d.pop("size_gib")

        resize = cls(
            size_gib=size_gib,
        )

        return resize


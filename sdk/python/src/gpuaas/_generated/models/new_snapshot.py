from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset







T = TypeVar("T", bound="NewSnapshot")



@_attrs_define
class NewSnapshot:
    """ A snapshot to take.

        Example:
            {'name': 'before-upgrade'}

        Attributes:
            name (str): 1 to 63 lowercase letters, digits and `-`; unique among the project's snapshots.
     """

    name: str





    def to_dict(self) -> dict[str, Any]:
        name = self.name


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "name": name,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        name = d.pop("name")

        new_snapshot = cls(
            name=name,
        )

        return new_snapshot


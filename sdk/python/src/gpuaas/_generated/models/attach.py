from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from uuid import UUID






T = TypeVar("T", bound="Attach")



@_attrs_define
class Attach:
    """ Which instance to attach to.

        Attributes:
            instance (UUID): A project's lease of slots or of a whole node.
     """

    instance: UUID





    def to_dict(self) -> dict[str, Any]:
        instance = str(self.instance)


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "instance": instance,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        instance = UUID(d.pop("instance"))




        attach = cls(
            instance=instance,
        )

        return attach


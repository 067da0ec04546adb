from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from uuid import UUID






T = TypeVar("T", bound="KeyToken")



@_attrs_define
class KeyToken:
    """ The API token a saved key was added through, as its owner tells tokens apart.

        Attributes:
            display_prefix (str): `gpk_` and the next 8 characters of its secret.
            id (UUID): A bearer token for the public API, acting for the person who made it.
            name (str):
     """

    display_prefix: str
    id: UUID
    name: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        display_prefix = self.display_prefix

        id = str(self.id)

        name = self.name


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "display_prefix": display_prefix,
            "id": id,
            "name": name,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        display_prefix = d.pop("display_prefix")

        id = UUID(d.pop("id"))




        name = d.pop("name")

        key_token = cls(
            display_prefix=display_prefix,
            id=id,
            name=name,
        )


        key_token.additional_properties = d
        return key_token

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

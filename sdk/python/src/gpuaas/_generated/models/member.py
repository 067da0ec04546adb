from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.project_role import ProjectRole
from uuid import UUID






T = TypeVar("T", bound="Member")



@_attrs_define
class Member:
    """ 
        Attributes:
            display_name (str):
            email (str):
            role (ProjectRole): A person's role in a project.
            user_id (UUID): A person (or break-glass admin). Attribution only; users never own resources.
     """

    display_name: str
    email: str
    role: ProjectRole
    user_id: UUID
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        display_name = self.display_name

        email = self.email

        role = self.role.value

        user_id = str(self.user_id)


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "display_name": display_name,
            "email": email,
            "role": role,
            "user_id": user_id,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        display_name = d.pop("display_name")

        email = d.pop("email")

        role = ProjectRole(d.pop("role"))




        user_id = UUID(d.pop("user_id"))




        member = cls(
            display_name=display_name,
            email=email,
            role=role,
            user_id=user_id,
        )


        member.additional_properties = d
        return member

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

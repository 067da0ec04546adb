from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.project_role import ProjectRole
from uuid import UUID






T = TypeVar("T", bound="ProjectSummary")



@_attrs_define
class ProjectSummary:
    """ A project as a list shows it.

        Attributes:
            canonical_name (str):
            display_name (str):
            id (UUID): A project inside a tenant: the operational scope that owns resources.
            members (int):
            my_role (ProjectRole): A person's role in a project.
            slug (str):
     """

    canonical_name: str
    display_name: str
    id: UUID
    members: int
    my_role: ProjectRole
    slug: str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        canonical_name = self.canonical_name

        display_name = self.display_name

        id = str(self.id)

        members = self.members

        my_role = self.my_role.value

        slug = self.slug


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "canonical_name": canonical_name,
            "display_name": display_name,
            "id": id,
            "members": members,
            "my_role": my_role,
            "slug": slug,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        canonical_name = d.pop("canonical_name")

        display_name = d.pop("display_name")

        id = UUID(d.pop("id"))




        members = d.pop("members")

        my_role = ProjectRole(d.pop("my_role"))




        slug = d.pop("slug")

        project_summary = cls(
            canonical_name=canonical_name,
            display_name=display_name,
            id=id,
            members=members,
            my_role=my_role,
            slug=slug,
        )


        project_summary.additional_properties = d
        return project_summary

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

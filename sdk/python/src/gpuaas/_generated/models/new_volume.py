from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID






T = TypeVar("T", bound="NewVolume")



@_attrs_define
class NewVolume:
    """ A volume to create.

        Example:
            {'name': 'datasets', 'project': '0a0e0000-0000-4000-8001-000000000001', 'region': 'eu-west-1', 'size_gib': 500}

        Attributes:
            name (str): 1 to 63 lowercase letters, digits and `-`; unique among the project's volumes.
            project (None | Unset | UUID):
            region (str | Unset): Where it lives: instances of this region can attach it. May be left out with
                `snapshot` (the snapshot's region).
            size_gib (int | None | Unset): 1 to 16384. May be left out with `snapshot` (the snapshot's size).
            snapshot (None | Unset | UUID):
     """

    name: str
    project: None | Unset | UUID = UNSET
    region: str | Unset = UNSET
    size_gib: int | None | Unset = UNSET
    snapshot: None | Unset | UUID = UNSET





    def to_dict(self) -> dict[str, Any]:
        name = self.name

        project: None | str | Unset
        if isinstance(self.project, Unset):
            project = UNSET
        elif isinstance(self.project, UUID):
            project = str(self.project)
        else:
            project = self.project

        region = self.region

        size_gib: int | None | Unset
        if isinstance(self.size_gib, Unset):
            size_gib = UNSET
        else:
            size_gib = self.size_gib

        snapshot: None | str | Unset
        if isinstance(self.snapshot, Unset):
            snapshot = UNSET
        elif isinstance(self.snapshot, UUID):
            snapshot = str(self.snapshot)
        else:
            snapshot = self.snapshot


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "name": name,
        })
        if project is not UNSET:
            field_dict["project"] = project
        if region is not UNSET:
            field_dict["region"] = region
        if size_gib is not UNSET:
            field_dict["size_gib"] = size_gib
        if snapshot is not UNSET:
            field_dict["snapshot"] = snapshot

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        name = d.pop("name")

        def _parse_project(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                project_type_1 = UUID(data)



                return project_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        project = _parse_project(d.pop("project", UNSET))


        region = d.pop("region", UNSET)

        def _parse_size_gib(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        size_gib = _parse_size_gib(d.pop("size_gib", UNSET))


        def _parse_snapshot(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                snapshot_type_1 = UUID(data)



                return snapshot_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        snapshot = _parse_snapshot(d.pop("snapshot", UNSET))


        new_volume = cls(
            name=name,
            project=project,
            region=region,
            size_gib=size_gib,
            snapshot=snapshot,
        )

        return new_volume


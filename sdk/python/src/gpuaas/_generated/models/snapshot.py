from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.snapshot_state import SnapshotState
from ..types import UNSET, Unset
from typing import cast
from uuid import UUID
import datetime

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="Snapshot")



@_attrs_define
class Snapshot:
    """ A snapshot as its project's members, the API and the CLI read it.

        Attributes:
            created_at (datetime.datetime):
            id (UUID): A point-in-time copy of a volume, from which new volumes are made.
            monthly_cost (Money): Integer minor units (cents) of a currency.
            name (str):
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            region (str):
            size_gib (int): What it holds: its volume's size when it was taken. A volume made from it holds at
                least this.
            state (SnapshotState): Where a snapshot is in its life (`snapshot_transitions` in the database).
            volume_id (UUID): A project's block volume on its region's storage backend.
            volume_name (str):
            error (None | str | Unset): Why it is in `error`.
     """

    created_at: datetime.datetime
    id: UUID
    monthly_cost: Money
    name: str
    project_id: UUID
    region: str
    size_gib: int
    state: SnapshotState
    volume_id: UUID
    volume_name: str
    error: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        created_at = self.created_at.isoformat()

        id = str(self.id)

        monthly_cost = self.monthly_cost.to_dict()

        name = self.name

        project_id = str(self.project_id)

        region = self.region

        size_gib = self.size_gib

        state = self.state.value

        volume_id = str(self.volume_id)

        volume_name = self.volume_name

        error: None | str | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "id": id,
            "monthly_cost": monthly_cost,
            "name": name,
            "project_id": project_id,
            "region": region,
            "size_gib": size_gib,
            "state": state,
            "volume_id": volume_id,
            "volume_name": volume_name,
        })
        if error is not UNSET:
            field_dict["error"] = error

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        id = UUID(d.pop("id"))




        monthly_cost = Money.from_dict(d.pop("monthly_cost"))




        name = d.pop("name")

        project_id = UUID(d.pop("project_id"))




        region = d.pop("region")

        size_gib = d.pop("size_gib")

        state = SnapshotState(d.pop("state"))




        volume_id = UUID(d.pop("volume_id"))




        volume_name = d.pop("volume_name")

        def _parse_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error = _parse_error(d.pop("error", UNSET))


        snapshot = cls(
            created_at=created_at,
            id=id,
            monthly_cost=monthly_cost,
            name=name,
            project_id=project_id,
            region=region,
            size_gib=size_gib,
            state=state,
            volume_id=volume_id,
            volume_name=volume_name,
            error=error,
        )


        snapshot.additional_properties = d
        return snapshot

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

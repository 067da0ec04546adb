from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.volume_state import VolumeState
from ..types import UNSET, Unset
from typing import cast
from uuid import UUID
import datetime

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="Volume")



@_attrs_define
class Volume:
    """ A volume as its project's members, the API and the CLI read it.

        Attributes:
            created_at (datetime.datetime):
            id (UUID): A project's block volume on its region's storage backend.
            kind (str): `block`: attached to one instance at a time.
            name (str):
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            region (str):
            size_gib (int):
            state (VolumeState): Where a volume is in its life. The database holds the same table of moves
                (`volume_transitions`) and refuses every other.
            state_changed_at (datetime.datetime):
            attached_name (None | str | Unset): That instance's name.
            attached_to (None | Unset | UUID):
            error (None | str | Unset): Why it is in `error`.
            monthly_cost (Money | None | Unset):
            source_snapshot (None | Unset | UUID):
            source_snapshot_name (None | str | Unset): That snapshot's name.
     """

    created_at: datetime.datetime
    id: UUID
    kind: str
    name: str
    project_id: UUID
    region: str
    size_gib: int
    state: VolumeState
    state_changed_at: datetime.datetime
    attached_name: None | str | Unset = UNSET
    attached_to: None | Unset | UUID = UNSET
    error: None | str | Unset = UNSET
    monthly_cost: Money | None | Unset = UNSET
    source_snapshot: None | Unset | UUID = UNSET
    source_snapshot_name: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        created_at = self.created_at.isoformat()

        id = str(self.id)

        kind = self.kind

        name = self.name

        project_id = str(self.project_id)

        region = self.region

        size_gib = self.size_gib

        state = self.state.value

        state_changed_at = self.state_changed_at.isoformat()

        attached_name: None | str | Unset
        if isinstance(self.attached_name, Unset):
            attached_name = UNSET
        else:
            attached_name = self.attached_name

        attached_to: None | str | Unset
        if isinstance(self.attached_to, Unset):
            attached_to = UNSET
        elif isinstance(self.attached_to, UUID):
            attached_to = str(self.attached_to)
        else:
            attached_to = self.attached_to

        error: None | str | Unset
        if isinstance(self.error, Unset):
            error = UNSET
        else:
            error = self.error

        monthly_cost: dict[str, Any] | None | Unset
        if isinstance(self.monthly_cost, Unset):
            monthly_cost = UNSET
        elif isinstance(self.monthly_cost, Money):
            monthly_cost = self.monthly_cost.to_dict()
        else:
            monthly_cost = self.monthly_cost

        source_snapshot: None | str | Unset
        if isinstance(self.source_snapshot, Unset):
            source_snapshot = UNSET
        elif isinstance(self.source_snapshot, UUID):
            source_snapshot = str(self.source_snapshot)
        else:
            source_snapshot = self.source_snapshot

        source_snapshot_name: None | str | Unset
        if isinstance(self.source_snapshot_name, Unset):
            source_snapshot_name = UNSET
        else:
            source_snapshot_name = self.source_snapshot_name


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "id": id,
            "kind": kind,
            "name": name,
            "project_id": project_id,
            "region": region,
            "size_gib": size_gib,
            "state": state,
            "state_changed_at": state_changed_at,
        })
        if attached_name is not UNSET:
            field_dict["attached_name"] = attached_name
        if attached_to is not UNSET:
            field_dict["attached_to"] = attached_to
        if error is not UNSET:
            field_dict["error"] = error
        if monthly_cost is not UNSET:
            field_dict["monthly_cost"] = monthly_cost
        if source_snapshot is not UNSET:
            field_dict["source_snapshot"] = source_snapshot
        if source_snapshot_name is not UNSET:
            field_dict["source_snapshot_name"] = source_snapshot_name

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        id = UUID(d.pop("id"))




        kind = d.pop("kind")

        name = d.pop("name")

        project_id = UUID(d.pop("project_id"))




        region = d.pop("region")

        size_gib = d.pop("size_gib")

        state = VolumeState(d.pop("state"))




        state_changed_at = datetime.datetime.fromisoformat(d.pop("state_changed_at"))




        def _parse_attached_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        attached_name = _parse_attached_name(d.pop("attached_name", UNSET))


        def _parse_attached_to(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                attached_to_type_1 = UUID(data)



                return attached_to_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        attached_to = _parse_attached_to(d.pop("attached_to", UNSET))


        def _parse_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        error = _parse_error(d.pop("error", UNSET))


        def _parse_monthly_cost(data: object) -> Money | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                monthly_cost_type_1 = Money.from_dict(data)



                return monthly_cost_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Money | None | Unset, data)

        monthly_cost = _parse_monthly_cost(d.pop("monthly_cost", UNSET))


        def _parse_source_snapshot(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                source_snapshot_type_1 = UUID(data)



                return source_snapshot_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        source_snapshot = _parse_source_snapshot(d.pop("source_snapshot", UNSET))


        def _parse_source_snapshot_name(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        source_snapshot_name = _parse_source_snapshot_name(d.pop("source_snapshot_name", UNSET))


        volume = cls(
            created_at=created_at,
            id=id,
            kind=kind,
            name=name,
            project_id=project_id,
            region=region,
            size_gib=size_gib,
            state=state,
            state_changed_at=state_changed_at,
            attached_name=attached_name,
            attached_to=attached_to,
            error=error,
            monthly_cost=monthly_cost,
            source_snapshot=source_snapshot,
            source_snapshot_name=source_snapshot_name,
        )


        volume.additional_properties = d
        return volume

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

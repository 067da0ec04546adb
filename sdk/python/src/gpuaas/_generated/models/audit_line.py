from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
import datetime

if TYPE_CHECKING:
  from ..models.field_change import FieldChange





T = TypeVar("T", bound="AuditLine")



@_attrs_define
class AuditLine:
    """ One audit record as people read it.

        Attributes:
            action (str):
            actor (str): The actor's email, or `system`.
            at (datetime.datetime):
            change (str): `before → after`, as compact JSON.
            resource (str): The canonical name of the resource.
            changes (list[FieldChange] | Unset): The same, field by field: only the fields that changed.
            id (int | Unset): Its place in the log: a search for older records starts before it.
            request_id (None | str | Unset):
     """

    action: str
    actor: str
    at: datetime.datetime
    change: str
    resource: str
    changes: list[FieldChange] | Unset = UNSET
    id: int | Unset = UNSET
    request_id: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.field_change import FieldChange # noqa: PLC0415
        action = self.action

        actor = self.actor

        at = self.at.isoformat()

        change = self.change

        resource = self.resource

        changes: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.changes, Unset):
            changes = []
            for changes_item_data in self.changes:
                changes_item = changes_item_data.to_dict()
                changes.append(changes_item)



        id = self.id

        request_id: None | str | Unset
        if isinstance(self.request_id, Unset):
            request_id = UNSET
        else:
            request_id = self.request_id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "action": action,
            "actor": actor,
            "at": at,
            "change": change,
            "resource": resource,
        })
        if changes is not UNSET:
            field_dict["changes"] = changes
        if id is not UNSET:
            field_dict["id"] = id
        if request_id is not UNSET:
            field_dict["request_id"] = request_id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.field_change import FieldChange # noqa: PLC0415
        d = dict(src_dict)
        action = d.pop("action")

        actor = d.pop("actor")

        at = datetime.datetime.fromisoformat(d.pop("at"))




        change = d.pop("change")

        resource = d.pop("resource")

        _changes = d.pop("changes", UNSET)
        changes: list[FieldChange] | Unset = UNSET
        if _changes is not UNSET:
            changes = []
            for changes_item_data in _changes:
                changes_item = FieldChange.from_dict(changes_item_data)



                changes.append(changes_item)


        id = d.pop("id", UNSET)

        def _parse_request_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        request_id = _parse_request_id(d.pop("request_id", UNSET))


        audit_line = cls(
            action=action,
            actor=actor,
            at=at,
            change=change,
            resource=resource,
            changes=changes,
            id=id,
            request_id=request_id,
        )


        audit_line.additional_properties = d
        return audit_line

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

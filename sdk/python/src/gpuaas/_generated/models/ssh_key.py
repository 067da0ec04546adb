from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID
import datetime

if TYPE_CHECKING:
  from ..models.key_token import KeyToken





T = TypeVar("T", bound="SshKey")



@_attrs_define
class SshKey:
    """ One saved SSH public key (the key itself is not repeated: its fingerprint names it).

        Attributes:
            created_at (datetime.datetime):
            fingerprint (str): `SHA256:…`, as `ssh-keygen -l` prints it.
            id (UUID): A public key a user saved on their account page.
            kind (str): `ssh-ed25519`, `ssh-rsa`, …
            name (str):
            added_via_token (KeyToken | None | Unset):
            comment (None | str | Unset): The key's own comment (often `user@host`), if it has one.
            last_used_at (datetime.datetime | None | Unset): When a launch last put it on a machine.
     """

    created_at: datetime.datetime
    fingerprint: str
    id: UUID
    kind: str
    name: str
    added_via_token: KeyToken | None | Unset = UNSET
    comment: None | str | Unset = UNSET
    last_used_at: datetime.datetime | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.key_token import KeyToken # noqa: PLC0415
        created_at = self.created_at.isoformat()

        fingerprint = self.fingerprint

        id = str(self.id)

        kind = self.kind

        name = self.name

        added_via_token: dict[str, Any] | None | Unset
        if isinstance(self.added_via_token, Unset):
            added_via_token = UNSET
        elif isinstance(self.added_via_token, KeyToken):
            added_via_token = self.added_via_token.to_dict()
        else:
            added_via_token = self.added_via_token

        comment: None | str | Unset
        if isinstance(self.comment, Unset):
            comment = UNSET
        else:
            comment = self.comment

        last_used_at: None | str | Unset
        if isinstance(self.last_used_at, Unset):
            last_used_at = UNSET
        elif isinstance(self.last_used_at, datetime.datetime):
            last_used_at = self.last_used_at.isoformat()
        else:
            last_used_at = self.last_used_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "fingerprint": fingerprint,
            "id": id,
            "kind": kind,
            "name": name,
        })
        if added_via_token is not UNSET:
            field_dict["added_via_token"] = added_via_token
        if comment is not UNSET:
            field_dict["comment"] = comment
        if last_used_at is not UNSET:
            field_dict["last_used_at"] = last_used_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.key_token import KeyToken # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        fingerprint = d.pop("fingerprint")

        id = UUID(d.pop("id"))




        kind = d.pop("kind")

        name = d.pop("name")

        def _parse_added_via_token(data: object) -> KeyToken | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                added_via_token_type_1 = KeyToken.from_dict(data)



                return added_via_token_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(KeyToken | None | Unset, data)

        added_via_token = _parse_added_via_token(d.pop("added_via_token", UNSET))


        def _parse_comment(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        comment = _parse_comment(d.pop("comment", UNSET))


        def _parse_last_used_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_used_at_type_0 = datetime.datetime.fromisoformat(data)



                return last_used_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        last_used_at = _parse_last_used_at(d.pop("last_used_at", UNSET))


        ssh_key = cls(
            created_at=created_at,
            fingerprint=fingerprint,
            id=id,
            kind=kind,
            name=name,
            added_via_token=added_via_token,
            comment=comment,
            last_used_at=last_used_at,
        )


        ssh_key.additional_properties = d
        return ssh_key

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

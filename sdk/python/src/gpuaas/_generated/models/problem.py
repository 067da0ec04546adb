from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="Problem")



@_attrs_define
class Problem:
    """ An error, as RFC 9457 describes it.

        Example:
            {'code': 'invalid', 'detail': 'Invalid region: use lowercase letters, digits and dashes, at most 64
                characters.', 'field': 'region', 'status': 400, 'title': 'Invalid input', 'type': 'urn:gpuaas:problem:invalid'}

        Attributes:
            code (str): Stable and machine-readable: `invalid`, `not_found`, `sku_unavailable`,
                `policy_denied`, `quota_exceeded`, `budget_exceeded`, `conflict`, `unauthenticated`,
                `forbidden`, `rate_limited`, `internal`, …
            detail (str): What went wrong this time, in a sentence for people.
            status (int):
            title (str): The same for every problem with this code.
            type_ (str): `urn:gpuaas:problem:{code}`.
            field (None | str | Unset): For `invalid`: the input that broke a rule.
            request_id (None | str | Unset): For `internal`: quote it to support; the cause is in our logs under it.
     """

    code: str
    detail: str
    status: int
    title: str
    type_: str
    field: None | str | Unset = UNSET
    request_id: None | str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        code = self.code

        detail = self.detail

        status = self.status

        title = self.title

        type_ = self.type_

        field: None | str | Unset
        if isinstance(self.field, Unset):
            field = UNSET
        else:
            field = self.field

        request_id: None | str | Unset
        if isinstance(self.request_id, Unset):
            request_id = UNSET
        else:
            request_id = self.request_id


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "code": code,
            "detail": detail,
            "status": status,
            "title": title,
            "type": type_,
        })
        if field is not UNSET:
            field_dict["field"] = field
        if request_id is not UNSET:
            field_dict["request_id"] = request_id

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        code = d.pop("code")

        detail = d.pop("detail")

        status = d.pop("status")

        title = d.pop("title")

        type_ = d.pop("type")

        def _parse_field(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        field = _parse_field(d.pop("field", UNSET))


        def _parse_request_id(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        request_id = _parse_request_id(d.pop("request_id", UNSET))


        problem = cls(
            code=code,
            detail=detail,
            status=status,
            title=title,
            type_=type_,
            field=field,
            request_id=request_id,
        )


        problem.additional_properties = d
        return problem

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

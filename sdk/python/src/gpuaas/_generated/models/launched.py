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
  from ..models.launched_tags import LaunchedTags
  from ..models.money import Money





T = TypeVar("T", bound="Launched")



@_attrs_define
class Launched:
    """ What a launch answers, and what a retry with the same `Idempotency-Key` answers again:
    the facts fixed at launch. Its progress is `GET /instances/{id}`.

        Example:
            {'created_at': '2026-11-25T10:00:00Z', 'expires_at': '2026-11-26T10:00:00Z', 'fee_per_hour': {'amount_minor': 0,
                'currency': 'USD'}, 'href': '/api/v1/instances/0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21', 'id':
                '0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21', 'image': 'Ubuntu 22.04 2026.11', 'name': 'train-7', 'price_per_hour':
                {'amount_minor': 299, 'currency': 'USD'}, 'project_id': '6a1d3c9e-2b44-4f0e-9d0b-4c8f6e1a2b3c', 'region': 'eu-
                west-1', 'sku': 'h100.1x', 'tags': {'team': 'vision'}}

        Attributes:
            created_at (datetime.datetime):
            fee_per_hour (Money): Integer minor units (cents) of a currency.
            href (str): Where to watch it.
            id (UUID): A project's lease of slots or of a whole node.
            image (str): The listing and version it runs.
            name (str):
            price_per_hour (Money): Integer minor units (cents) of a currency.
            project_id (UUID): A project inside a tenant: the operational scope that owns resources.
            region (str):
            sku (str):
            tags (LaunchedTags):
            expires_at (datetime.datetime | None | Unset):
     """

    created_at: datetime.datetime
    fee_per_hour: Money
    href: str
    id: UUID
    image: str
    name: str
    price_per_hour: Money
    project_id: UUID
    region: str
    sku: str
    tags: LaunchedTags
    expires_at: datetime.datetime | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.launched_tags import LaunchedTags # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        created_at = self.created_at.isoformat()

        fee_per_hour = self.fee_per_hour.to_dict()

        href = self.href

        id = str(self.id)

        image = self.image

        name = self.name

        price_per_hour = self.price_per_hour.to_dict()

        project_id = str(self.project_id)

        region = self.region

        sku = self.sku

        tags = self.tags.to_dict()

        expires_at: None | str | Unset
        if isinstance(self.expires_at, Unset):
            expires_at = UNSET
        elif isinstance(self.expires_at, datetime.datetime):
            expires_at = self.expires_at.isoformat()
        else:
            expires_at = self.expires_at


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "created_at": created_at,
            "fee_per_hour": fee_per_hour,
            "href": href,
            "id": id,
            "image": image,
            "name": name,
            "price_per_hour": price_per_hour,
            "project_id": project_id,
            "region": region,
            "sku": sku,
            "tags": tags,
        })
        if expires_at is not UNSET:
            field_dict["expires_at"] = expires_at

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.launched_tags import LaunchedTags # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        created_at = datetime.datetime.fromisoformat(d.pop("created_at"))




        fee_per_hour = Money.from_dict(d.pop("fee_per_hour"))




        href = d.pop("href")

        id = UUID(d.pop("id"))




        image = d.pop("image")

        name = d.pop("name")

        price_per_hour = Money.from_dict(d.pop("price_per_hour"))




        project_id = UUID(d.pop("project_id"))




        region = d.pop("region")

        sku = d.pop("sku")

        tags = LaunchedTags.from_dict(d.pop("tags"))




        def _parse_expires_at(data: object) -> datetime.datetime | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                expires_at_type_0 = datetime.datetime.fromisoformat(data)



                return expires_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None | Unset, data)

        expires_at = _parse_expires_at(d.pop("expires_at", UNSET))


        launched = cls(
            created_at=created_at,
            fee_per_hour=fee_per_hour,
            href=href,
            id=id,
            image=image,
            name=name,
            price_per_hour=price_per_hour,
            project_id=project_id,
            region=region,
            sku=sku,
            tags=tags,
            expires_at=expires_at,
        )


        launched.additional_properties = d
        return launched

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.category import Category
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="Image")



@_attrs_define
class Image:
    """ What a project may launch: a published listing's current version (an OS image, or a
    marketplace stack or app), as the API lists it.

        Attributes:
            accepts_user_data (bool): Whether a launch may carry its own cloud-init user data.
            category (Category):
            name (str):
            publisher (str):
            skus (list[str]): The SKUs it runs on that the project may launch, by name.
            slug (str): What a launch names as `listing`: `ubuntu-24.04-cuda`.
            ssh_user (str): The account the SSH keys are installed for.
            summary (str):
            version (str): The current version, what a launch without `version` gets.
            fee_per_hour (Money | None | Unset):
            published_ports (list[int] | Unset): The guest ports the software listens on (vLLM's 8000): worth publishing at
                launch.
     """

    accepts_user_data: bool
    category: Category
    name: str
    publisher: str
    skus: list[str]
    slug: str
    ssh_user: str
    summary: str
    version: str
    fee_per_hour: Money | None | Unset = UNSET
    published_ports: list[int] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        accepts_user_data = self.accepts_user_data

        category = self.category.value

        name = self.name

        publisher = self.publisher

        skus = self.skus



        slug = self.slug

        ssh_user = self.ssh_user

        summary = self.summary

        version = self.version

        fee_per_hour: dict[str, Any] | None | Unset
        if isinstance(self.fee_per_hour, Unset):
            fee_per_hour = UNSET
        elif isinstance(self.fee_per_hour, Money):
            fee_per_hour = self.fee_per_hour.to_dict()
        else:
            fee_per_hour = self.fee_per_hour

        published_ports: list[int] | Unset = UNSET
        if not isinstance(self.published_ports, Unset):
            published_ports = self.published_ports




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "accepts_user_data": accepts_user_data,
            "category": category,
            "name": name,
            "publisher": publisher,
            "skus": skus,
            "slug": slug,
            "ssh_user": ssh_user,
            "summary": summary,
            "version": version,
        })
        if fee_per_hour is not UNSET:
            field_dict["fee_per_hour"] = fee_per_hour
        if published_ports is not UNSET:
            field_dict["published_ports"] = published_ports

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        accepts_user_data = d.pop("accepts_user_data")

        category = Category(d.pop("category"))




        name = d.pop("name")

        publisher = d.pop("publisher")

        skus = cast(list[str], d.pop("skus"))


        slug = d.pop("slug")

        ssh_user = d.pop("ssh_user")

        summary = d.pop("summary")

        version = d.pop("version")

        def _parse_fee_per_hour(data: object) -> Money | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                fee_per_hour_type_1 = Money.from_dict(data)



                return fee_per_hour_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(Money | None | Unset, data)

        fee_per_hour = _parse_fee_per_hour(d.pop("fee_per_hour", UNSET))


        published_ports = cast(list[int], d.pop("published_ports", UNSET))


        image = cls(
            accepts_user_data=accepts_user_data,
            category=category,
            name=name,
            publisher=publisher,
            skus=skus,
            slug=slug,
            ssh_user=ssh_user,
            summary=summary,
            version=version,
            fee_per_hour=fee_per_hour,
            published_ports=published_ports,
        )


        image.additional_properties = d
        return image

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

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="InvoiceSummary")



@_attrs_define
class InvoiceSummary:
    """ One invoice in a list.

        Attributes:
            id (UUID): A tenant's invoice for one month and currency.
            month (str):
            number (str): `(draft)` until finalised.
            payment_failed (bool): A payment attempt failed and the invoice is still open: someone must act.
            status (str):
            tenant (str): The organization's slug.
            total (Money): Integer minor units (cents) of a currency.
            hosted_invoice_url (None | str | Unset):
            payment_error (None | str | Unset):
            stripe_status (None | str | Unset): Stripe's view; `None` until the invoice is synced.
            tenant_name (str | Unset): The organization's name, as people read it.
     """

    id: UUID
    month: str
    number: str
    payment_failed: bool
    status: str
    tenant: str
    total: Money
    hosted_invoice_url: None | str | Unset = UNSET
    payment_error: None | str | Unset = UNSET
    stripe_status: None | str | Unset = UNSET
    tenant_name: str | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        id = str(self.id)

        month = self.month

        number = self.number

        payment_failed = self.payment_failed

        status = self.status

        tenant = self.tenant

        total = self.total.to_dict()

        hosted_invoice_url: None | str | Unset
        if isinstance(self.hosted_invoice_url, Unset):
            hosted_invoice_url = UNSET
        else:
            hosted_invoice_url = self.hosted_invoice_url

        payment_error: None | str | Unset
        if isinstance(self.payment_error, Unset):
            payment_error = UNSET
        else:
            payment_error = self.payment_error

        stripe_status: None | str | Unset
        if isinstance(self.stripe_status, Unset):
            stripe_status = UNSET
        else:
            stripe_status = self.stripe_status

        tenant_name = self.tenant_name


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "id": id,
            "month": month,
            "number": number,
            "payment_failed": payment_failed,
            "status": status,
            "tenant": tenant,
            "total": total,
        })
        if hosted_invoice_url is not UNSET:
            field_dict["hosted_invoice_url"] = hosted_invoice_url
        if payment_error is not UNSET:
            field_dict["payment_error"] = payment_error
        if stripe_status is not UNSET:
            field_dict["stripe_status"] = stripe_status
        if tenant_name is not UNSET:
            field_dict["tenant_name"] = tenant_name

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        id = UUID(d.pop("id"))




        month = d.pop("month")

        number = d.pop("number")

        payment_failed = d.pop("payment_failed")

        status = d.pop("status")

        tenant = d.pop("tenant")

        total = Money.from_dict(d.pop("total"))




        def _parse_hosted_invoice_url(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        hosted_invoice_url = _parse_hosted_invoice_url(d.pop("hosted_invoice_url", UNSET))


        def _parse_payment_error(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        payment_error = _parse_payment_error(d.pop("payment_error", UNSET))


        def _parse_stripe_status(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        stripe_status = _parse_stripe_status(d.pop("stripe_status", UNSET))


        tenant_name = d.pop("tenant_name", UNSET)

        invoice_summary = cls(
            id=id,
            month=month,
            number=number,
            payment_failed=payment_failed,
            status=status,
            tenant=tenant,
            total=total,
            hosted_invoice_url=hosted_invoice_url,
            payment_error=payment_error,
            stripe_status=stripe_status,
            tenant_name=tenant_name,
        )


        invoice_summary.additional_properties = d
        return invoice_summary

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

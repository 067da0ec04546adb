from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.budget_status import BudgetStatus
  from ..models.cluster_spend import ClusterSpend
  from ..models.money import Money
  from ..models.spend_point import SpendPoint
  from ..models.storage_spend import StorageSpend





T = TypeVar("T", bound="Overview")



@_attrs_define
class Overview:
    """ A tenant's month so far.

        Attributes:
            budgets (list[BudgetStatus]):
            credit_balance (Money): Integer minor units (cents) of a currency.
            currency (str):
            daily (list[SpendPoint]): Rated spend per day, project and SKU this month.
            forecast (Money): Integer minor units (cents) of a currency.
            month (str): `2026-11`.
            month_to_date (Money): Integer minor units (cents) of a currency.
            running_per_hour (Money): Integer minor units (cents) of a currency.
            storage (StorageSpend): A tenant's storage this month, beside compute.
            clusters (list[ClusterSpend] | Unset): Each cluster that ran this month and what its members cost: part of the
                month to date,
                newest first.
     """

    budgets: list[BudgetStatus]
    credit_balance: Money
    currency: str
    daily: list[SpendPoint]
    forecast: Money
    month: str
    month_to_date: Money
    running_per_hour: Money
    storage: StorageSpend
    clusters: list[ClusterSpend] | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.budget_status import BudgetStatus # noqa: PLC0415
        from ..models.cluster_spend import ClusterSpend # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.spend_point import SpendPoint # noqa: PLC0415
        from ..models.storage_spend import StorageSpend # noqa: PLC0415
        budgets = []
        for budgets_item_data in self.budgets:
            budgets_item = budgets_item_data.to_dict()
            budgets.append(budgets_item)



        credit_balance = self.credit_balance.to_dict()

        currency = self.currency

        daily = []
        for daily_item_data in self.daily:
            daily_item = daily_item_data.to_dict()
            daily.append(daily_item)



        forecast = self.forecast.to_dict()

        month = self.month

        month_to_date = self.month_to_date.to_dict()

        running_per_hour = self.running_per_hour.to_dict()

        storage = self.storage.to_dict()

        clusters: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.clusters, Unset):
            clusters = []
            for clusters_item_data in self.clusters:
                clusters_item = clusters_item_data.to_dict()
                clusters.append(clusters_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "budgets": budgets,
            "credit_balance": credit_balance,
            "currency": currency,
            "daily": daily,
            "forecast": forecast,
            "month": month,
            "month_to_date": month_to_date,
            "running_per_hour": running_per_hour,
            "storage": storage,
        })
        if clusters is not UNSET:
            field_dict["clusters"] = clusters

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.budget_status import BudgetStatus # noqa: PLC0415
        from ..models.cluster_spend import ClusterSpend # noqa: PLC0415
        from ..models.money import Money # noqa: PLC0415
        from ..models.spend_point import SpendPoint # noqa: PLC0415
        from ..models.storage_spend import StorageSpend # noqa: PLC0415
        d = dict(src_dict)
        budgets = []
        _budgets = d.pop("budgets")
        for budgets_item_data in (_budgets):
            budgets_item = BudgetStatus.from_dict(budgets_item_data)



            budgets.append(budgets_item)


        credit_balance = Money.from_dict(d.pop("credit_balance"))




        currency = d.pop("currency")

        daily = []
        _daily = d.pop("daily")
        for daily_item_data in (_daily):
            daily_item = SpendPoint.from_dict(daily_item_data)



            daily.append(daily_item)


        forecast = Money.from_dict(d.pop("forecast"))




        month = d.pop("month")

        month_to_date = Money.from_dict(d.pop("month_to_date"))




        running_per_hour = Money.from_dict(d.pop("running_per_hour"))




        storage = StorageSpend.from_dict(d.pop("storage"))




        _clusters = d.pop("clusters", UNSET)
        clusters: list[ClusterSpend] | Unset = UNSET
        if _clusters is not UNSET:
            clusters = []
            for clusters_item_data in _clusters:
                clusters_item = ClusterSpend.from_dict(clusters_item_data)



                clusters.append(clusters_item)


        overview = cls(
            budgets=budgets,
            credit_balance=credit_balance,
            currency=currency,
            daily=daily,
            forecast=forecast,
            month=month,
            month_to_date=month_to_date,
            running_per_hour=running_per_hour,
            storage=storage,
            clusters=clusters,
        )


        overview.additional_properties = d
        return overview

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

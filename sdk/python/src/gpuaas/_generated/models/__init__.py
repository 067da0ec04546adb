""" Contains all the data models used in inputs/outputs """

from .allocation_detail import AllocationDetail
from .allocation_summary import AllocationSummary
from .attach import Attach
from .audit_line import AuditLine
from .audit_list import AuditList
from .b_tree_map import BTreeMap
from .budget_status import BudgetStatus
from .category import Category
from .certificate import Certificate
from .cluster import Cluster
from .cluster_list import ClusterList
from .cluster_member import ClusterMember
from .cluster_spend import ClusterSpend
from .field_change import FieldChange
from .gpu_health_notice import GpuHealthNotice
from .gpu_utilisation import GpuUtilisation
from .image import Image
from .image_list import ImageList
from .instance_list import InstanceList
from .invoice_list import InvoiceList
from .invoice_summary import InvoiceSummary
from .key_token import KeyToken
from .launched import Launched
from .launched_tags import LaunchedTags
from .member import Member
from .member_list import MemberList
from .money import Money
from .new_cluster import NewCluster
from .new_cluster_tags import NewClusterTags
from .new_instance import NewInstance
from .new_instance_tags import NewInstanceTags
from .new_snapshot import NewSnapshot
from .new_ssh_key import NewSshKey
from .new_volume import NewVolume
from .offer import Offer
from .offer_list import OfferList
from .overview import Overview
from .phase import Phase
from .port_address import PortAddress
from .problem import Problem
from .project_list import ProjectList
from .project_role import ProjectRole
from .project_summary import ProjectSummary
from .resize import Resize
from .shape import Shape
from .snapshot import Snapshot
from .snapshot_list import SnapshotList
from .snapshot_state import SnapshotState
from .spend_point import SpendPoint
from .ssh_endpoint import SshEndpoint
from .ssh_key import SshKey
from .ssh_key_list import SshKeyList
from .stopped_disk import StoppedDisk
from .storage_price import StoragePrice
from .storage_price_list import StoragePriceList
from .storage_spend import StorageSpend
from .transition import Transition
from .volume import Volume
from .volume_list import VolumeList
from .volume_state import VolumeState

__all__ = (
    "AllocationDetail",
    "AllocationSummary",
    "Attach",
    "AuditLine",
    "AuditList",
    "BTreeMap",
    "BudgetStatus",
    "Category",
    "Certificate",
    "Cluster",
    "ClusterList",
    "ClusterMember",
    "ClusterSpend",
    "FieldChange",
    "GpuHealthNotice",
    "GpuUtilisation",
    "Image",
    "ImageList",
    "InstanceList",
    "InvoiceList",
    "InvoiceSummary",
    "KeyToken",
    "Launched",
    "LaunchedTags",
    "Member",
    "MemberList",
    "Money",
    "NewCluster",
    "NewClusterTags",
    "NewInstance",
    "NewInstanceTags",
    "NewSnapshot",
    "NewSshKey",
    "NewVolume",
    "Offer",
    "OfferList",
    "Overview",
    "Phase",
    "PortAddress",
    "Problem",
    "ProjectList",
    "ProjectRole",
    "ProjectSummary",
    "Resize",
    "Shape",
    "Snapshot",
    "SnapshotList",
    "SnapshotState",
    "SpendPoint",
    "SshEndpoint",
    "SshKey",
    "SshKeyList",
    "StoppedDisk",
    "StoragePrice",
    "StoragePriceList",
    "StorageSpend",
    "Transition",
    "Volume",
    "VolumeList",
    "VolumeState",
)

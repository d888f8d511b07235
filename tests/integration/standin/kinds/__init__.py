"""The kinds the stand-in serves: the catalogue (KIND_LIST, KINDS by group/version/resource,
BY_RES by resource), their known-field schemas, and the API groups in discovery order.
The kinds themselves are in base (Kind), storage, core, apps and rbac; schemas in schemas.
"""

from .apps import DaemonSetKind, DeploymentKind
from .core import EventKind, LeaseKind, NamespaceKind, NodeKind, PodKind
from .rbac import (ClusterRoleBindingKind, ClusterRoleKind, RBAC_GROUP, RoleBindingKind, RoleKind,
                   ServiceAccountKind)
from .schemas import (SCH_BINDING, SCH_CLUSTERROLE, SCH_DAEMONSET, SCH_DEPLOYMENT, SCH_EVENT,
                      SCH_CSIDRIVER, SCH_CSISC, SCH_LEASE, SCH_NAMESPACE, SCH_PV, SCH_PVC,
                      SCH_ROLE, SCH_SC, SCH_SERVICEACCOUNT)
from .storage import (CSIDriverKind, CSIStorageCapacityKind, PersistentVolumeClaimKind,
                      PersistentVolumeKind, StorageClassKind)

KIND_LIST = [PersistentVolumeKind(), PersistentVolumeClaimKind(), EventKind(),
             NamespaceKind(), NodeKind(), PodKind(), StorageClassKind(), LeaseKind(),
             ServiceAccountKind(), DeploymentKind(), DaemonSetKind(), ClusterRoleKind(),
             ClusterRoleBindingKind(), RoleKind(), RoleBindingKind(), CSIDriverKind(),
             CSIStorageCapacityKind()]
KINDS = {(k.group, k.version, k.resource): k for k in KIND_LIST}
BY_RES = {k.resource: k for k in KIND_LIST}
for _r, _sch in (("persistentvolumes", SCH_PV), ("persistentvolumeclaims", SCH_PVC),
                 ("events", SCH_EVENT), ("namespaces", SCH_NAMESPACE),
                 ("storageclasses", SCH_SC), ("leases", SCH_LEASE),
                 ("serviceaccounts", SCH_SERVICEACCOUNT), ("deployments", SCH_DEPLOYMENT),
                 ("daemonsets", SCH_DAEMONSET), ("clusterroles", SCH_CLUSTERROLE),
                 ("clusterrolebindings", SCH_BINDING), ("roles", SCH_ROLE),
                 ("rolebindings", SCH_BINDING), ("csidrivers", SCH_CSIDRIVER),
                 ("csistoragecapacities", SCH_CSISC)):
    BY_RES[_r].schema = _sch


# In kube-apiserver's order of /apis.
GROUPS = {"apps": ["v1"], RBAC_GROUP: ["v1"], "storage.k8s.io": ["v1"],
          "coordination.k8s.io": ["v1"]}

"""Known fields of each kind, for fieldValidation (unknown fields are dropped with a
warning, or refused), and prune_unknown.
"""

from .apps import POD_SPEC_ORDER
from .base import META_ORDER, PV_SOURCES
from .rbac import RULE_ORDER, SUBJECT_ORDER


# ---------------------------------------------------------------------------------------
# Known fields (for fieldValidation: unknown fields are dropped with a warning, or refused)
# A dict maps field names to their schema; None is a leaf or an opaque value; a 1-tuple
# (schema,) is a list of such objects.
# ---------------------------------------------------------------------------------------

def _leaves(*names):
    return {n: None for n in names}


SCH_OBJREF = _leaves("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion",
                     "fieldPath")
SCH_META = dict(_leaves(*META_ORDER), ownerReferences=(_leaves(
    "apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"),))
SCH_NODE_SELECTOR_TERM = {"matchExpressions": (_leaves("key", "operator", "values"),),
                          "matchFields": (_leaves("key", "operator", "values"),)}
SCH_PV = {
    "metadata": SCH_META,
    "spec": dict(_leaves(*PV_SOURCES, "capacity", "accessModes", "persistentVolumeReclaimPolicy",
                         "storageClassName", "mountOptions", "volumeMode",
                         "volumeAttributesClassName"),
                 hostPath=_leaves("path", "type"), local=_leaves("path", "fsType"),
                 claimRef=SCH_OBJREF,
                 nodeAffinity={"required": {"nodeSelectorTerms": (SCH_NODE_SELECTOR_TERM,)}}),
    "status": _leaves("phase", "message", "reason", "lastPhaseTransitionTime")}
SCH_PVC = {
    "metadata": SCH_META,
    "spec": dict(_leaves("accessModes", "selector", "volumeName", "storageClassName",
                         "volumeMode", "dataSource", "dataSourceRef",
                         "volumeAttributesClassName"),
                 resources=_leaves("limits", "requests")),
    "status": dict(_leaves("phase", "accessModes", "capacity", "allocatedResources",
                           "allocatedResourceStatuses", "currentVolumeAttributesClassName",
                           "modifyVolumeStatus"),
                   conditions=(_leaves("type", "status", "lastProbeTime", "lastTransitionTime",
                                       "reason", "message"),))}
SCH_SC = dict(_leaves("provisioner", "parameters", "reclaimPolicy", "mountOptions",
                      "allowVolumeExpansion", "volumeBindingMode", "allowedTopologies"),
              metadata=SCH_META)
SCH_CSIDRIVER = {"metadata": SCH_META,
                 "spec": dict(_leaves("attachRequired", "podInfoOnMount", "volumeLifecycleModes",
                                      "storageCapacity", "fsGroupPolicy", "requiresRepublish",
                                      "seLinuxMount", "nodeAllocatableUpdatePeriodSeconds",
                                      "serviceAccountTokenInSecrets",
                                      "preventPodSchedulingIfMissing"),
                              tokenRequests=(_leaves("audience", "expirationSeconds"),))}
SCH_CSISC = dict(_leaves("storageClassName", "capacity", "maximumVolumeSize"),
                 metadata=SCH_META,
                 nodeTopology={"matchLabels": None,
                               "matchExpressions": (_leaves("key", "operator", "values"),)})
SCH_EVENT = dict(_leaves("reason", "message", "firstTimestamp", "lastTimestamp", "count",
                         "type", "eventTime", "action", "reportingComponent",
                         "reportingInstance"),
                 metadata=SCH_META, involvedObject=SCH_OBJREF, related=SCH_OBJREF,
                 source=_leaves("component", "host"),
                 series=_leaves("count", "lastObservedTime"))
SCH_LEASE = {"metadata": SCH_META,
             "spec": _leaves("holderIdentity", "leaseDurationSeconds", "acquireTime",
                             "renewTime", "leaseTransitions", "strategy", "preferredHolder")}
SCH_NAMESPACE = {"metadata": SCH_META, "spec": _leaves("finalizers"),
                 "status": dict(_leaves("phase"), conditions=(_leaves(
                     "type", "status", "lastTransitionTime", "reason", "message"),))}

SCH_SECCOMP = _leaves("type", "localhostProfile")
SCH_PROBE = dict(_leaves("initialDelaySeconds", "timeoutSeconds", "periodSeconds",
                         "successThreshold", "failureThreshold",
                         "terminationGracePeriodSeconds"),
                 exec=_leaves("command"),
                 httpGet=dict(_leaves("path", "port", "host", "scheme"),
                              httpHeaders=(_leaves("name", "value"),)),
                 tcpSocket=_leaves("port", "host"), grpc=_leaves("port", "service"))
SCH_ENV_VAR = dict(_leaves("name", "value"), valueFrom={
    "fieldRef": _leaves("apiVersion", "fieldPath"),
    "resourceFieldRef": _leaves("containerName", "resource", "divisor"),
    "configMapKeyRef": _leaves("name", "key", "optional"),
    "secretKeyRef": _leaves("name", "key", "optional")})
SCH_CONTAINER = dict(
    _leaves("name", "image", "command", "args", "workingDir", "envFrom", "resizePolicy",
            "restartPolicy", "volumeDevices", "lifecycle", "terminationMessagePath",
            "terminationMessagePolicy", "imagePullPolicy", "stdin", "stdinOnce", "tty"),
    ports=(_leaves("name", "hostPort", "containerPort", "protocol", "hostIP"),),
    env=(SCH_ENV_VAR,), resources=_leaves("limits", "requests", "claims"),
    volumeMounts=(_leaves("name", "readOnly", "recursiveReadOnly", "mountPath", "subPath",
                          "mountPropagation", "subPathExpr"),),
    livenessProbe=SCH_PROBE, readinessProbe=SCH_PROBE, startupProbe=SCH_PROBE,
    securityContext=dict(_leaves("privileged", "seLinuxOptions", "windowsOptions",
                                 "runAsUser", "runAsGroup", "runAsNonRoot",
                                 "readOnlyRootFilesystem", "allowPrivilegeEscalation",
                                 "procMount"),
                         capabilities=_leaves("add", "drop"), seccompProfile=SCH_SECCOMP,
                         appArmorProfile=SCH_SECCOMP))
VOLUME_SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore",
                  "gitRepo", "secret", "nfs", "iscsi", "glusterfs", "persistentVolumeClaim",
                  "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
                  "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
                  "photonPersistentDisk", "projected", "portworxVolume", "scaleIO",
                  "storageos", "csi", "ephemeral", "image")
SCH_POD_SPEC = dict(
    _leaves(*(f for f in POD_SPEC_ORDER if f not in ("volumes", "initContainers", "containers",
                                                      "securityContext",
                                                      "imagePullSecrets"))),
    volumes=(dict(_leaves("name", *VOLUME_SOURCES), hostPath=_leaves("path", "type")),),
    initContainers=(SCH_CONTAINER,), containers=(SCH_CONTAINER,),
    imagePullSecrets=(_leaves("name"),),
    securityContext=dict(_leaves("seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup",
                                 "runAsNonRoot", "supplementalGroups",
                                 "supplementalGroupsPolicy", "fsGroup", "sysctls",
                                 "fsGroupChangePolicy", "seLinuxChangePolicy"),
                         seccompProfile=SCH_SECCOMP, appArmorProfile=SCH_SECCOMP))
SCH_POD_TEMPLATE = {"metadata": SCH_META, "spec": SCH_POD_SPEC}
SCH_ROLLING = _leaves("maxUnavailable", "maxSurge")
SCH_DEPLOYMENT = {
    "metadata": SCH_META,
    "spec": dict(_leaves("replicas", "selector", "minReadySeconds", "revisionHistoryLimit",
                         "paused", "progressDeadlineSeconds"),
                 template=SCH_POD_TEMPLATE,
                 strategy=dict(_leaves("type"), rollingUpdate=SCH_ROLLING)),
    "status": _leaves("observedGeneration", "replicas", "updatedReplicas", "readyReplicas",
                      "availableReplicas", "unavailableReplicas", "conditions",
                      "collisionCount")}
SCH_DAEMONSET = {
    "metadata": SCH_META,
    "spec": dict(_leaves("selector", "minReadySeconds", "revisionHistoryLimit"),
                 template=SCH_POD_TEMPLATE,
                 updateStrategy=dict(_leaves("type"), rollingUpdate=SCH_ROLLING)),
    "status": _leaves("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled",
                      "numberReady", "observedGeneration", "updatedNumberScheduled",
                      "numberAvailable", "numberUnavailable", "collisionCount", "conditions")}
SCH_SERVICEACCOUNT = {"metadata": SCH_META, "secrets": (SCH_OBJREF,),
                      "imagePullSecrets": (_leaves("name"),),
                      "automountServiceAccountToken": None}
SCH_ROLE = {"metadata": SCH_META, "rules": (_leaves(*RULE_ORDER),)}
SCH_CLUSTERROLE = dict(SCH_ROLE, aggregationRule=_leaves("clusterRoleSelectors"))
SCH_BINDING = {"metadata": SCH_META, "subjects": (_leaves(*SUBJECT_ORDER),),
               "roleRef": _leaves("apiGroup", "kind", "name")}


def prune_unknown(obj, schema, path, out):
    """Removes fields the schema does not know; appends their paths to out."""
    if not isinstance(obj, dict):
        return
    for k in list(obj):
        if k not in schema:
            out.append(path + k)
            del obj[k]
            continue
        sub = schema[k]
        if isinstance(sub, dict):
            prune_unknown(obj[k], sub, path + k + ".", out)
        elif isinstance(sub, tuple) and isinstance(obj[k], list):
            for i, item in enumerate(obj[k]):
                prune_unknown(item, sub[0], "%s%s[%d]." % (path, k, i), out)

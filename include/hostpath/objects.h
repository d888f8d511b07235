/* objects: compact views of the Kubernetes objects the controller reads, and the JSON it writes.
 *
 * Any thread (pure functions). A decoded object is one heap block holding the struct and all of
 * its strings; free it with free(). Strings that are absent are "" (never NULL) unless noted.
 * Packed maps (annotations, labels, parameters) are "k\0v\0k\0v\0\0": read with hp_packed_get.
 *
 * Lifetime: a decoded object, and the text hp_pv_build returns, are single heap blocks: free().
 */
#ifndef HOSTPATH_OBJECTS_H
#define HOSTPATH_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "hostpath/json.h"

#define HP_ANN_PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define HP_ANN_IDENTITY "hostPathProvisionerIdentity"
#define HP_ANN_STORAGE_PROVISIONER "volume.kubernetes.io/storage-provisioner"
#define HP_ANN_BETA_STORAGE_PROVISIONER "volume.beta.kubernetes.io/storage-provisioner"
#define HP_ANN_SELECTED_NODE "volume.kubernetes.io/selected-node"
#define HP_ANN_ALPHA_SELECTED_NODE "volume.alpha.kubernetes.io/selected-node"
#define HP_ANN_BETA_STORAGE_CLASS "volume.beta.kubernetes.io/storage-class"
#define HP_FINALIZER "external-provisioner.volume.kubernetes.io/finalizer"
/* The on-delete decision made at provisioning ("delete" | "retain" | "archive"), on our PVs. */
#define HP_ANN_ON_DELETE "hostpath.provisioner/on-delete"
/* local-path-provisioner's names, read as it reads them:
 * - on a claim, volumeType ("local" | "hostPath", any case) chooses the PV's kind;
 * - on a StorageClass, defaultVolumeType does when the claim says nothing, and userPattern,
 *   groupPattern, permPattern, allowUnsafePathPattern stand in for the parameters of those names
 *   when the class has none;
 * - on a PV, local.path.provisioner/selected-node names the node its directory is on (it writes
 *   it on every PV; hp_pv_build writes it when the node affinity does not name the node). */
#define HP_ANN_VOLUME_TYPE "volumeType"
#define HP_ANN_DEFAULT_VOLUME_TYPE "defaultVolumeType"
#define HP_ANN_USER_PATTERN "userPattern"
#define HP_ANN_GROUP_PATTERN "groupPattern"
#define HP_ANN_PERM_PATTERN "permPattern"
#define HP_ANN_ALLOW_UNSAFE_PATH "allowUnsafePathPattern"
#define HP_ANN_LPP_SELECTED_NODE "local.path.provisioner/selected-node"
/* The node label node affinity uses unless a class says nodeAffinityKey. */
#define HP_LABEL_HOSTNAME "kubernetes.io/hostname"
/* Labels on the PVs we make (and on claims, by the claim labeller): the node the directory is
 * on and the provisioner, as label values (hp_label_value). A node instance watches PVs (and
 * claims) by HP_LABEL_NODE, so the API server sends it only its own (docs/design.md, "A
 * thousand nodes"). */
#define HP_LABEL_NODE "hostpath-provisioner.io/node"
#define HP_LABEL_PROVISIONER "hostpath-provisioner.io/provisioner"
/* Room for a label value and its NUL. */
#define HP_LABEL_VALUE_MAX 64

/* A reclaim policy (StorageClass reclaimPolicy, PV persistentVolumeReclaimPolicy,
 * --default-reclaim-policy). */
enum hp_reclaim { HP_RECLAIM_UNSET = 0, HP_RECLAIM_DELETE, HP_RECLAIM_RETAIN, HP_RECLAIM_RECYCLE };

/* "Delete" | "Retain" | "Recycle" -> 0 and *out, else -EINVAL (*out unchanged). */
int hp_parse_reclaim(const char *s, enum hp_reclaim *out);
/* The API's name of r; "" for HP_RECLAIM_UNSET. */
const char *hp_reclaim_name(enum hp_reclaim r);

enum {
    HP_ACCESS_RWO = 1 << 0,  /* ReadWriteOnce */
    HP_ACCESS_ROX = 1 << 1,  /* ReadOnlyMany */
    HP_ACCESS_RWX = 1 << 2,  /* ReadWriteMany */
    HP_ACCESS_RWOP = 1 << 3, /* ReadWriteOncePod */
};

struct hp_claim {
    const char *namespace_;
    const char *name;
    const char *uid;
    const char *resource_version;
    const char *volume_name;   /* spec.volumeName */
    /* beta annotation when present (even ""), else spec.storageClassName. NULL when neither is
     * set (the API server's admission would fill in the default class); "" is Kubernetes'
     * explicit "no class" and is kept as "". Likewise provisioner and selected_node are the
     * annotation's value when present (possibly ""), NULL when absent. */
    const char *class_name;
    const char *provisioner;   /* storage-provisioner annotation, else beta; NULL when none */
    const char *selected_node; /* selected-node annotation, else alpha; NULL when none */
    const char *request;       /* spec.resources.requests.storage as written ("1Gi") */
    const char *status_capacity; /* status.capacity.storage ("" when none) */
    const char *annotations;   /* packed (HP_ANN_VOLUME_TYPE always kept) */
    const char *labels;        /* packed (HP_LABEL_NODE always kept) */
    const char *label_node;    /* the HP_LABEL_NODE label's value, NULL when absent */
    uint8_t access_modes;      /* HP_ACCESS_* */
    uint8_t block;             /* spec.volumeMode == "Block" */
    uint8_t deleting;          /* metadata.deletionTimestamp is set */
    uint8_t selector;          /* spec.selector is set: dynamic provisioning cannot honour it */
    uint8_t data_source;       /* spec.dataSource or dataSourceRef is set (clone, snapshot) */
    uint8_t maps_kept;         /* labels/annotations kept as its class's pathPattern needs */
    /* marked as being resized to its request, as an expansion marks it first: a Resizing
     * condition, status.allocatedResourceStatuses[storage] ControllerResizeInProgress and
     * status.allocatedResources[storage] written as spec's request */
    uint8_t resize_marked;
    char key[];                /* "namespace/name", then the packed strings */
};

struct hp_volume {
    const char *name;
    const char *resource_version;
    const char *phase;          /* status.phase */
    const char *provisioned_by; /* annotation pv.kubernetes.io/provisioned-by */
    const char *identity;       /* annotation hostPathProvisionerIdentity */
    const char *class_name;     /* spec.storageClassName */
    const char *claim_namespace; /* spec.claimRef */
    const char *claim_name;
    const char *claim_uid;
    const char *path; /* spec.hostPath.path, or spec.local.path (local set) */
    const char *on_delete; /* annotation HP_ANN_ON_DELETE, NULL when absent */
    /* The node the directory is on, NULL when the PV has no required node affinity (a shared
     * path, or --pv-dir without --node-name): the annotation HP_ANN_LPP_SELECTED_NODE when the
     * PV has node affinity and the annotation is not empty (an affinity on nodeAffinityKey holds
     * a label's value, not a node name), else the kubernetes.io/hostname affinity's value. A PV
     * whose affinity is on another key and has no such annotation reads NULL. */
    const char *node;
    const char *capacity;  /* spec.capacity.storage as written ("" when none) */
    /* The values of our labels HP_LABEL_NODE and HP_LABEL_PROVISIONER, NULL when absent */
    const char *label_node, *label_provisioner;
    enum hp_reclaim reclaim;
    uint8_t our_finalizer; /* metadata.finalizers holds HP_FINALIZER */
    uint8_t deleting;      /* metadata.deletionTimestamp is set */
    uint8_t local;         /* a local volume (spec.local), not a hostPath one */
    /* The required node affinity lets no other node than `node` mount the PV (one term, one
     * value). Else a node not named `node` may mount it too: several values or terms, NotIn,
     * another key. */
    uint8_t node_only;
    char key[];            /* name */
};

struct hp_class {
    const char *name;
    const char *provisioner;
    const char *resource_version;
    const char *parameters;    /* packed */
    /* packed: only the annotations read as local-path-provisioner reads them
     * (HP_ANN_DEFAULT_VOLUME_TYPE, _USER_PATTERN, _GROUP_PATTERN, _PERM_PATTERN,
     * _ALLOW_UNSAFE_PATH); the others are not kept */
    const char *annotations;
    const char *mount_options; /* packed list: "a\0b\0\0" */
    enum hp_reclaim reclaim;   /* HP_RECLAIM_UNSET when the class says none */
    uint8_t wait_for_first_consumer;
    uint8_t allow_expansion; /* allowVolumeExpansion: true */
    char key[]; /* name */
};

/* What a claim decoder keeps of labels and annotations. wanted(class, &ann, &labels, ctx)
 * answers 1 when claims of that class may be provisioned by us and sets the packed key lists
 * ("a\0b\0\0"; NULL = none) its pathPattern reads; those are kept, besides the annotations every
 * decision reads (class, storage-provisioner, selected-node). A bound claim, or one of a class
 * that is not ours, keeps only the latter. */
struct hp_claim_filter {
    int (*wanted)(const char *class_name, const char **ann_keys, const char **label_keys,
                  void *ctx);
    void *ctx;
};

/* Decoders of the object at token obj of a parsed reader (borrowed; nothing of it is kept).
 * NULL when j is NULL, obj is not an object, it lacks metadata.name (or namespace for claims),
 * or a field a decision reads holds a NUL (\u0000: no C string can hold it); a NUL in a label
 * or annotation nothing reads only drops that entry. Strings are copied unescaped. A map key that repeats keeps its last value (as
 * jansson and Go read it). Caller frees. */
struct hp_claim *hp_claim_decode(const struct hp_json *j, int obj); /* keeps every label and
                                                                       annotation */
struct hp_claim *hp_claim_decode_filtered(const struct hp_json *j, int obj,
                                          const struct hp_claim_filter *filter);
struct hp_volume *hp_volume_decode(const struct hp_json *j, int obj);
struct hp_class *hp_class_decode(const struct hp_json *j, int obj);

/* What a watch filter needs of a PersistentVolume before deciding to decode it: -1 when it
 * names no directory (neither spec.hostPath.path nor spec.local.path, e.g. a CSI volume); else
 * the path is copied into path (truncated to plen - 1 bytes), and the result is 1 when its node
 * affinity lets exactly one node mount it (hp_volume.node_only), that node copied into node
 * (truncated to len - 1 bytes), 0 otherwise (no node, or several may mount it). */
int hp_volume_peek(const struct hp_json *j, int obj, char *node, size_t len, char *path,
                   size_t plen);

/* The label value that stands for s (a node or provisioner name): s itself when it is a valid
 * label value (at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends), else up to
 * 46 characters of it with every other character turned into '_' (trimmed to alphanumeric
 * ends; "x" when nothing is left), '-', and the 16 hex digits of its 64-bit FNV-1a hash.
 * Distinct names may share a value only through a hash collision: a selector on it is a filter,
 * never a decision. 0, or -EINVAL for an empty s or len < HP_LABEL_VALUE_MAX. */
int hp_label_value(const char *s, char *out, size_t len);

/* The merge patch that sets our labels on a PV: HP_LABEL_NODE = node_value (NULL: the label is
 * removed) and HP_LABEL_PROVISIONER = provisioner_value, both label values (hp_label_value).
 * Caller frees. */
char *hp_pv_labels_patch(const char *node_value, const char *provisioner_value);

/* The merge patch that labels a claim HP_LABEL_NODE = node_value (a label value), with
 * metadata.resourceVersion = resource_version as a precondition when given (the API server
 * answers 409 if the claim changed since). Caller frees; NULL when a string is not UTF-8. */
char *hp_claim_label_patch(const char *node_value, const char *resource_version);

/* Value for key in a packed map, or NULL. */
const char *hp_packed_get(const char *packed, const char *key);
/* Step over one string. Iterate a packed list: for (p = packed; *p; p = hp_packed_next(p));
 * a packed map alternates key and value, so step twice per entry. */
const char *hp_packed_next(const char *p);

struct hp_pv_spec {
    const char *name; /* pvc-<claim uid> */
    const struct hp_claim *claim;
    const char *class_name;    /* the class's name (storageClassName when the claim names none) */
    const char *mount_options; /* the class's packed mountOptions, or NULL */
    const char *provisioner;
    const char *identity;
    const char *path;    /* absolute host path */
    /* The node the directory is on, or NULL for no node affinity (a shared path, or --pv-dir
     * without --node-name). With a node, the PV requires node affinity affinity_key In
     * [affinity_value]: by default kubernetes.io/hostname = node. */
    const char *node;
    const char *affinity_key;   /* nodeAffinityKey; NULL: kubernetes.io/hostname */
    const char *affinity_value; /* that label's value on the node (policy.h); NULL: node */
    int local; /* spec.local {path} (a local volume) instead of spec.hostPath {path,
                  DirectoryOrCreate}; needs a node, since a local PV must have node affinity */
    const char *on_delete; /* HP_ANN_ON_DELETE value, or NULL */
    enum hp_reclaim reclaim;
    int add_finalizer;
};

/* The PersistentVolume of docs/design.md ("What it writes to Kubernetes") as compact JSON text
 * (caller frees), labelled HP_LABEL_PROVISIONER and, with a node, HP_LABEL_NODE. NULL when a required input (name, claim, provisioner, identity, path) is
 * missing, a string is not UTF-8, an affinity key or value is given without a node, or a local
 * volume has no node. Built with jansson, which checks every string (CONTRIBUTING.md: JSON).
 * The annotation HP_ANN_LPP_SELECTED_NODE = node is written when the affinity is not
 * kubernetes.io/hostname = node, so that hp_volume_decode still knows the node. */
char *hp_pv_build(const struct hp_pv_spec *spec);

/* The merge patch that makes a PV another provisioner made (local-path-provisioner's, --take-over)
 * ours: our identity and the on-delete decision as annotations. Caller frees; NULL when a string
 * is not UTF-8. */
char *hp_pv_takeover_patch(const char *identity, const char *on_delete);

/* "pvc-<uid>" into out; -ENAMETOOLONG when it does not fit, -EINVAL when the uid is empty. */
int hp_pv_name(const struct hp_claim *claim, char *out, size_t outlen);

#endif

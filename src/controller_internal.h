/* controller_internal: what the controller's rooms share -- private to src/controller.c and
 * src/ctl_*.c, as libuv's src/unix/internal.h is to its handle files; nothing else includes it.
 *
 * The controller (include/hostpath/controller.h) is one module in rooms, each with one
 * responsibility, their dependencies running one way (a room calls only rooms above it in this
 * list; upward calls go through the hooks of struct hp_controller):
 *
 *   ctl_quota.c      hard limits: which roots enforce them and can, what a request needs of
 *                    them, the lowest project ID a new volume may take
 *   ctl_roots.c      volume roots, the volume index and accounting, placement
 *   ctl_op.c         the operation core: an op's life, its API and filesystem requests, events,
 *                    the work queue's outcome
 *   ctl_labels.c     the labels node instances are watched by: our PVs' (and their migration),
 *                    the claim labeller's
 *   ctl_scan.c       reading each root's journal (and its roots file)
 *   ctl_usage.c      measuring bound volumes, kubelet's volume metrics
 *   ctl_expand.c     online expansion
 *   ctl_release.c    released volumes: finalizer, release of the directory, PV deletion,
 *                    recording volumes made before the journal
 *   ctl_provision.c  claims: placement decisions, the directory, the PV, and undoing a half-made
 *                    volume
 *   ctl_sweep.c      the orphan sweep: records whose claim and PV are gone
 *   ctl_capacity.c   capacity-aware scheduling: the CSIDriver object, this node's
 *                    CSIStorageCapacity objects (what placement could grant, per class)
 *   controller.c     informers, the work queue's dispatch, lifecycle, the public API
 *
 * Loop thread only, as the whole controller. Names shared between rooms are hp__<name>
 * (CONTRIBUTING.md); everything else stays static in its room.
 */
#ifndef HOSTPATH_CONTROLLER_INTERNAL_H
#define HOSTPATH_CONTROLLER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hostpath/common.h"
#include "hostpath/controller.h"
#include "hostpath/events.h"
#include "hostpath/fsops.h"
#include "hostpath/hostpath.h"
#include "hostpath/journal.h"
#include "hostpath/kube_client.h"
#include "hostpath/list.h"
#include "hostpath/objects.h"
#include "hostpath/policy.h"
#include "hostpath/volindex.h"

struct hp_buf;
struct hp_informer;
struct hp_store;
struct hp_workqueue;

#define KEY_MAX 600
#define QUEUE_NAME "hostpath"
/* Unrecorded directories remembered as already logged (a bound on memory, not on logging). */
#define MAX_LOGGED_UNRECORDED 10000
/* A failed journal scan is tried again after this long. */
#define SCAN_RETRY_MS 5000
/* Recent writes (expect.h) are trusted over the cache for this long at most (client-go's
 * ExpectationsTimeout), and at most this many are kept. */
#define EXPECT_TTL_MS (5 * 60 * 1000)
#define EXPECT_MAX 65536
/* The expectation that a claim's cached copy is stale: its PV's name behind this prefix. */
#define EXPECT_CLAIM_PREFIX "claim-of:"
/* The expectation that a PV we labelled leaves the unlabelled watch before the node's watch
 * shows it: its name behind this prefix. */
#define EXPECT_RELABEL_PREFIX "relabel:"
/* The expectation that this process finished the expansion of a claim whose watch copy does
 * not show it yet: the claim's uid behind this prefix (ctl_expand.c). */
#define EXPECT_EXPANDED_PREFIX "expanded:"

/* OUT_WAIT: retried with backoff for as long as it takes (a disk that is not mounted), never
 * given up on. */
enum outcome { OUT_OK, OUT_RETRY, OUT_RETRY_AFTER, OUT_WAIT, OUT_GIVE_UP };
struct op;

/* What kind of operation an op is, as h2o's per-protocol function pointers: the op core needs
 * nothing else of it. Each room defines the types of its operations:
 *   provision, cleanup (undo a half-made volume)   ctl_provision.c
 *   delete, finalize (--add-finalizer on a volume made before the flag), migrate (record a
 *   volume made before the journal)                 ctl_release.c
 *   orphan (settle a record whose claim and PV are gone)  ctl_sweep.c
 *   expand                                          ctl_expand.c */
struct op_type {
    const char *name;
    /* Given up after --failed-retry-threshold failures: the event's reason, on the claim
     * (give_up_on_claim) or on the PV. */
    const char *give_up_reason;
    int give_up_on_claim;
    /* Settles a journal record without a PV object: nothing to delete in the API, and only
     * what nobody uses is removed (the orphan sweep). */
    int settles_record;
    /* The outcome, for the op's metrics (NULL: none). */
    void (*metrics)(const struct op *op, int ok, double seconds);
    /* Called by hp__op_finish with the outcome, before the op is freed (NULL: nothing). */
    void (*finished)(struct op *op, enum outcome out);
};

extern const struct op_type hp__op_provision, hp__op_cleanup, hp__op_delete, hp__op_finalize,
    hp__op_migrate, hp__op_orphan, hp__op_expand;

struct op {
    struct hp_controller *c;
    struct hp_list link; /* in c->ops */
    /* provision: in c->announcing while its Provisioning event is due if it is still running */
    struct hp_list announce_link;
    uint64_t announce_due; /* uv_now ms */
    const char *qkey; /* the work queue's key, valid until hp_workqueue_done */
    const struct op_type *type;
    char *claim_key;  /* namespace/name */
    char *claim_uid;
    char *pv_name;
    char *class_name;
    char *rel;        /* the directory, relative to the root */
    char *path;       /* the directory, absolute */
    char *last_error; /* for the give-up event */
    char *adopt;      /* provision: the retained volume whose directory is taken over */
    struct root *root; /* the volume root the directory is (to be) under */
    uint64_t reserved; /* provision: bytes reserved on root while in flight (expand: the
                          growth) */
    char *size;        /* expand: the size written (the claim's new request, or the PV's) */
    char *request;     /* expand: the claim's request it grows to, as written */
    int finalizer;    /* delete: the PV carries our finalizer */
    int pv_deleting;  /* delete: the PV already has a deletionTimestamp */
    enum hp_on_delete on_delete;
    enum hp_sweep_action sweep; /* orphan */
    struct hp_kube_req *req;
    struct hp_fsop *fsop; /* the filesystem request while it runs */
    uint64_t start_ms;
    int dir_made; /* provision: the directory exists (recorded), its PV may not */
    int reserving; /* provision: pv_name holds its path in the index (HP_SRC_RESERVED) */
    int requeue;   /* finished OK, its key is queued again (more of the same work is left) */
    /* provision: the PV to create (JSON text), and what it is built from besides the claim */
    char *pv_body;
    char *node;          /* the node the directory is on, or NULL (a shared path, or no node) */
    char *affinity_key;  /* provision: the node label of the PV's affinity (nodeAffinityKey) */
    int local;           /* provision: a local PV, not a hostPath one */
    int shared;          /* provision: on a shared path: no node affinity */
    struct hp_dir_attrs attrs; /* provision: the directory's mode and owner */
    char *mount_options; /* the class's, packed, or NULL */
    enum hp_reclaim reclaim;
};

struct hp_controller {
    uv_loop_t *loop;
    const struct hp_config *cfg;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct root **roots; /* this node's volume roots (--pv-dir, or its --config paths) */
    /* --config as last loaded (borrowed from main, whose map outlives the controller; NULL
     * without --config): which of the roots a StorageClass may use (storageClassConfigs), and
     * whether they are a shared path. */
    const struct hp_nodemap *map;
    size_t nroots;
    struct hp_store *acct; /* PV name -> the root and capacity it takes (struct acct) */
    /* claims start once classes and volumes are in. Per node (--node-name), claims holds the
     * claims labelled with this node, volumes the PVs labelled with it and foreign those with no
     * node label; otherwise claims holds every claim this instance may act on, volumes every PV
     * that names a directory, and foreign is NULL (docs/design.md, "A thousand nodes"). */
    struct hp_informer *claims, *volumes, *foreign, *classes;
    /* Per node, while leading: every claim, for those the leader serves itself (no selected node,
     * shared paths) and those it labels for their node (ctl_labels.c); NULL otherwise. */
    struct hp_informer *claims_all;
    /* Label values (hp_label_value) of --node-name (empty without one) and of the provisioner */
    char node_label[HP_LABEL_VALUE_MAX], prov_label[HP_LABEL_VALUE_MAX];
    struct hp_store *class_keys; /* class name -> what its pathPattern reads (struct class_keys) */
    struct hp_volindex *index;
    struct hp_store *logged_unrecorded;
    struct hp_store *logged_identity; /* released PVs of another identity, said once */
    /* Live PVs on this node that are not ours ("name\0path"): hand-made, other provisioners',
     * other identities'. Their paths may reach our directories by another spelling, so every
     * step that makes, takes over or removes a directory has fsops compare it with them on
     * disk (fsops.h, others). */
    struct hp_store *others;
    uv_mutex_t others_lock; /* others changes on the loop, read by workers (hp__add_others) */
    /* PVs this process created or deleted that the volume watch has not shown yet: until it
     * does, what reconciling trusts instead of the cache (expect.h). */
    struct hp_expect *expect;
    int node_held;           /* ... and this one holds it (always 1 when not required) */
    int all_synced;
    int journal_loaded; /* every root's journal was read once */
    uint32_t quota_id_max; /* the highest project ID a record named (ctl_quota.c) */
    int scans;          /* root scans (and journal list writes) in flight */
    /* Volume paths whose ownership journal was seen: by this process, or listed in a journals
     * file (journal.h) of one of the roots. One that shows no journal is a disk that is not
     * mounted, and takes no new volume (ctl_scan.c). Strings. */
    struct hp_store *seen_journals;
    struct hp_workqueue *queue;
    uv_timer_t resync, rescan, usage_timer;
    uv_timer_t announce; /* the Provisioning events of slow provisionings */
    struct hp_store *usage;         /* PV name -> struct usage: bound volumes of ours here */
    struct hp_hostpath *usage_hp;   /* one worker: a huge volume never stalls provisioning */
    struct hp_fsop *usage_op;       /* the measurement in flight */
    char **usage_round;             /* PV names still to measure this round */
    size_t usage_n, usage_i;
    int leading;
    int stopping;
    int closing_handles;
    int closing_informers;
    int capacity_busy; /* ctl_capacity.c: its handles and filesystem requests not yet closed */
    struct hp_claim_filter claim_filter;
    struct hp_list ops;        /* every operation running */
    struct hp_list announcing; /* provisionings whose Provisioning event is due, oldest first */
    hp_close_cb close_cb;
    void *close_data;
    /* Hooks: the calls a room makes into controller.c (set by hp_controller_new). */
    void (*maybe_closed)(struct hp_controller *c); /* an op, a scan or a measurement ended
                                                      while stopping: the last one closes */
    /* A journal read of root r ended (f its result, freed after the call; first: the root's
     * first read): the sweep, and whether the controller is in sync now. */
    void (*scanned)(struct hp_controller *c, struct root *r, const struct hp_fsop *f, int first);
    /* A root's numbers changed (hp__root_metrics: reserved bytes, budget, size and free bytes,
     * retired): what capacity publishing (ctl_capacity.c) says may have to follow. */
    void (*room_changed)(const struct hp_controller *c);
    /* ctl_capacity.c's state (CSIDriver, CSIStorageCapacity objects); NULL before init. */
    struct hp_capacity *capacity;
};


/* One directory volumes are made under, with its own journal: --pv-dir, or a path of this node
 * in --config. */
struct root {
    struct hp_controller *c;
    char *path;        /* absolute, normalised */
    uint64_t budget;   /* bytes; 0 = the filesystem's size */
    double overcommit; /* how many times its budget claims may reserve (--config; 1: no more) */
    int allow_rootfs;
    int retired;       /* no longer configured: no new volumes, the rest as usual */
    int shared;        /* a sharedFileSystemPath: every node sees it; only the leader works on
                          it (makes, sweeps, removes) */
    int listed;        /* retired at start because a roots file listed it (add_retired) */
    int journal_found; /* the last journal read found a journal (an unmounted disk: none) */
    int missing_said;  /* retired and listed, but without a journal: said once */
    struct hp_fs_stats stats; /* as the last filesystem request saw it */
    uint64_t reserved; /* live volumes' capacity + provisionings in flight */
    struct hp_fsop *scan; /* the journal scan in flight, or NULL */
    struct hp_fsop *lists; /* the roots and journals files being written (ROOTS), or NULL */
    int scan_pending;      /* a journal read waits for that write to end */
    int64_t scan_started;
    int journal_loaded;
    int leftovers_cleaned; /* crash leftovers were removed (by a scan that works on disks) */
    int rootfs_said;   /* the "on the root filesystem" warning was given */
    int nearly_full;   /* reserved crossed 90% of the budget, said (again below 80%) */
    size_t orphans_unrecorded; /* directories no record accounts for, at the last scan */
    /* The filesystem its journal was read from (fs_known), and whether the path now shows
     * another one while volumes of ours were made on that one: an unmounted disk, whose empty
     * mount point must not take new volumes (fs_moved). */
    struct hp_fs_ident fs;
    int fs_known, fs_moved;
    uint64_t mount_id; /* the mount fs was seen on (hp_fsop mount_id; 0 unknown) */
    /* Times a volume made the path itself (ctl_provision.c), and that count when the scan in
     * flight started: a read that began before it saw the path missing, which it is not. */
    unsigned made, made_at_scan;
    /* Hard limits (ctl_quota.c): configured (--config hardLimits); the filesystem as last probed
     * (owned; NULL until a request probed it); why it cannot enforce them now, as the last
     * journal read's probe said (owned; NULL: it can, or was not asked). */
    int hard_limits;
    struct hp_quota_fs *quota_fs;
    char *quota_err;
};

/* What a class's pathPattern reads of a claim: a claim of that class keeps these labels and
 * annotations while it may be provisioned, and nothing else (informer.h, the memory rule). */
struct class_keys {
    char *name;
    char *fingerprint; /* the keys, to see whether a class update changed them */
    char *ann, *labels; /* packed lists, or NULL */
};

/* What a live volume takes from its root (for placement). */
struct acct {
    char *pv;
    struct root *root;
    uint64_t bytes;
};

/* ---- ctl_quota.c: hard limits ---- */

/* Gives request f on root r what hard limits need: the root's probed filesystem (a copy, when
 * the request may touch a project: pv names a record with an ID, or f makes a volume on a root
 * with hard limits, or reads its journal) and, for PROVISION and SCAN, whether the root has hard
 * limits; for PROVISION, the lowest project ID it may take. pv may be NULL. */
void hp__quota_request(const struct hp_controller *c, const struct root *r, struct hp_fsop *f,
                       const char *pv);
/* Request f on root r ended (whatever its status): the filesystem it probed is kept, the
 * project IDs its records name are noted (no new ID below them), and a journal read's probe
 * says whether r can enforce hard limits now (said once per change). */
void hp__quota_seen(struct hp_controller *c, struct root *r, const struct hp_fsop *f);
/* Why root r takes no new volume of a class with params now, for hard limits: it has none and
 * the class requires them, or it has them and cannot enforce them now. NULL: it may. Borrowed
 * from r. */
const char *hp__quota_excluded(const struct root *r, const struct hp_class_params *params);
/* Frees what ctl_quota.c keeps in a root. */
void hp__quota_root_free(struct root *r);

/* ---- ctl_roots.c: roots, the volume index, accounting, placement ---- */

/* The live PV of that name (from either volume informer), or NULL. */
const struct hp_volume *hp__volume(const struct hp_controller *c, const char *name);
/* The cached claim "namespace/name", or NULL. */
const struct hp_claim *hp__claim(const struct hp_controller *c, const char *key);
/* fn for every cached PV (both informers; a PV in both once). */
void hp__foreach_volume(const struct hp_controller *c, void (*fn)(const void *obj, void *data),
                        void *data);
/* 1 while PV name, labelled by us, may be missing from both volume informers (expect.h). */
int hp__relabelling(const struct hp_controller *c, const char *name);

/* Each room's part of hp_controller_new and of the final free. */
void hp__roots_init(struct hp_controller *c);
void hp__roots_free(struct hp_controller *c);
struct root *hp__add_root(struct hp_controller *c, const char *path, uint64_t budget,
                          int allow_rootfs);
/* The root a volume's hostPath lies strictly inside (the innermost), with the path relative to
 * it in rel; NULL when none. */
struct root *hp__root_of(const struct hp_controller *c, const char *abs, char *rel, size_t len);
struct root *hp__root_named(const struct hp_controller *c, const char *path);
/* The budget placement holds root r to: its capacity (or its filesystem's size) times its
 * overcommit; 0 when that is the filesystem's size, not yet known. */
uint64_t hp__root_budget(const struct root *r);
/* Exports root r's path metrics. */
void hp__root_metrics(const struct hp_controller *c, const struct root *r);
/* A filesystem request on root r answered: what it saw of the root's size and room. */
void hp__root_seen(struct hp_controller *c, struct root *r, const struct hp_fs_stats *st);
/* Whether this process does the disk work of a volume of node (NULL: none) now. */
int hp__works_on_disks(const struct hp_controller *c, const char *node);
/* Whether PV v (or the PV of an API answer) holds the directory rel under root. */
int hp__volume_holds(const struct hp_controller *c, const struct hp_volume *v,
                     const struct root *root, const char *rel);
int hp__answer_holds(const struct hp_controller *c, const struct hp_kube_response *resp,
                     const char *pv, const struct root *root, const char *rel);
/* A live volume appeared or changed (index its path, account its size, track it as another's),
 * or went. */
void hp__index_volume(struct hp_controller *c, const struct hp_volume *v);
void hp__unindex_volume(struct hp_controller *c, const char *name);
/* The record a filesystem request left (f->out), into the index. */
void hp__index_record(struct hp_controller *c, const struct hp_fsop *f);
/* PV `name` (every PV) is ours or another volume by its record: looked at again after the
 * journal changed. */
void hp__retrack_volume(struct hp_controller *c, const char *name);
void hp__retrack_volumes(struct hp_controller *c);
/* Gives a request that makes, takes over or removes the directory of its volume (rec.pv) the
 * other volumes of this node to compare it with (fsops.h, others): taken on the worker thread
 * right before each comparison, not when the request is queued. */
void hp__add_others(struct hp_controller *c, struct hp_fsop *f);
/* One line naming what holds a colliding path, for an event. */
void hp__describe_conflict(struct hp_controller *c, const struct hp_volindex_conflict *k,
                           char *out, size_t len);
/* Placement of a new volume of need bytes for class cls: 0 and the root, or -ENOENT (the class
 * has no path on this node: its nodePath, or storageClassConfigs) / -ENOSPC (none fits) and
 * why. */
int hp__place(const struct hp_controller *c, const char *cls, const struct hp_class_params *params,
              uint64_t need, struct root **out, char *why, size_t len);
/* 1 when the claims of class cls go to a shared path (storageClassConfigs or the top-level
 * sharedFileSystemPath), 0 when to node paths, -ENOENT when --config lists classes and not
 * this one. */
int hp__class_shared(const struct hp_controller *c, const char *cls);
/* hp__works_on_disks for the volumes of root r: a shared root is the leader's only. */
int hp__works_on_root(const struct hp_controller *c, const struct root *r, const char *node);
/* What placement could grant a class now (capacity publishing): the total room of the paths
 * hp__place weighs (a filesystem shared by several counted once), the largest single volume it
 * would accept, and a signature of the accounting behind them (changes when a budget,
 * reservation or exclusion does, not when only free bytes move). */
void hp__place_room(const struct hp_controller *c, const char *cls,
                    const struct hp_class_params *params, uint64_t *total, uint64_t *largest,
                    uint64_t *sig);

/* ---- ctl_op.c: the operation core ---- */

struct op *hp__op_new(struct hp_controller *c, const char *qkey, const struct op_type *type);
void hp__op_free(struct op *op);
/* Ends an operation: reports the outcome to the work queue and frees the op. */
void hp__op_finish(struct op *op, enum outcome out, uint64_t retry_after_ms);
/* Ends a reconcile that had nothing to do. */
void hp__nothing_to_do(struct hp_controller *c, const char *qkey);
/* 1 while an operation on volume pv runs. */
int hp__op_in_flight(const struct hp_controller *c, const char *pv);
/* Volume pv was indexed while its provisioning runs: that op's reservation ends (its bytes now
 * count through the PV). */
void hp__reservation_taken_over(struct hp_controller *c, const char *pv);
void hp__set_error(struct op *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Classifies an API response: OK, retry (5xx, 429, network), or permanent. */
enum outcome hp__api_outcome(struct op *op, const char *what, int status,
                             const struct hp_kube_response *resp, uint64_t *retry_after);
/* Operations that must not be abandoned retry what another would give up on. */
enum outcome hp__retry_on_give_up(enum outcome out);
/* Sends method to the operation's PV object; cb gets the response. */
void hp__pv_request(struct op *op, const char *method, const char *body, const char *ctype,
                    hp_kube_response_cb cb);
/* Queues a filesystem request of the operation; cb takes it back through hp__fs_ended. */
void hp__run_fs(struct op *op, struct hp_fsop *f, hp_hostpath_done_cb cb);
/* The operation's filesystem request ended: it is the caller's (who frees it); NULL when the
 * controller is stopping (the op is then finished here). */
struct hp_fsop *hp__fs_ended(struct op *op);
void hp__claim_ref(const struct hp_claim *cl, struct hp_object_ref *ref);
/* A claim key "ns/name": its namespace copied into ns (len bytes), its name returned; NULL
 * when key holds no '/' or the namespace does not fit. */
const char *hp__claim_key_split(const char *key, char *ns, size_t len);
/* Events on the operation's claim (if it is still in the store) and on its PV. */
void hp__claim_event(struct op *op, int warning, const char *reason, const char *msg);
void hp__volume_event(struct op *op, int warning, const char *reason, const char *msg);
/* A Provisioning event for a provisioning still running after half a second. */
void hp__announce_later(struct op *op);
/* Adds a work queue key: kind 'c' claim, 'v' volume, 'o' journal record. */
void hp__enqueue(struct hp_controller *c, char kind, const char *key);

/* ---- ctl_labels.c: the labels node instances are watched by ---- */

/* Labels PV v (ours, on a disk this process works on) with its node and the provisioner when
 * its labels differ: 1 when an operation took the key. */
int hp__label_volume(struct hp_controller *c, const char *qkey, const struct hp_volume *v);
/* A bound claim whose request is more than its status capacity (an expansion pending). */
int hp__claim_resize_pending(const struct hp_claim *cl);
/* Whether the claim labeller (the leader, per node) must label cl for a node: pending with a
 * selected node (not of a shared path, not this instance's own node), or bound with an
 * expansion pending, and its node label is not (or, without a selected node, not at all) that
 * node's. */
int hp__claim_needs_label(const struct hp_controller *c, const struct hp_claim *cl);
/* 1 when cl's selected node is this instance's --node-name. */
int hp__claim_for_own_node(const struct hp_controller *c, const struct hp_claim *cl);
/* The work queue's "l:<namespace>/<name>" key: labels the claim for its node. */
void hp__reconcile_claim_label(struct hp_controller *c, const char *qkey, const char *key);

/* ---- ctl_scan.c: reading the journals ---- */

void hp__start_scan(struct hp_controller *c);
/* Reads the roots not read yet (only_unready), or all. */
void hp__scan_roots(struct hp_controller *c, int only_unready);
void hp__rescan_root(struct hp_controller *c, struct root *r);
/* A root no longer configured stays known while it holds records (or was never read). */
int hp__root_holds(const struct hp_controller *c, const struct root *r);
/* The journal of root path was seen (a record was written there): once new, the journals file
 * of every root says so. */
void hp__journal_seen(struct hp_controller *c, const char *path);

/* ---- ctl_usage.c ---- */

void hp__usage_init(struct hp_controller *c);
void hp__usage_free(struct hp_controller *c);
void hp__track_usage(struct hp_controller *c, const char *name, const struct hp_volume *v);
void hp__on_usage_timer(uv_timer_t *t);
void hp__free_round(struct hp_controller *c);
/* The metrics collector of kubelet's volume families. */
void hp__render_usage(struct hp_buf *out, void *data);

/* ---- ctl_expand.c ---- */

/* A bound claim of an expandable class asks for more than its volume has: 1 when an expansion
 * took the key. */
int hp__maybe_expand(struct hp_controller *c, const char *qkey, const struct hp_claim *cl,
                     const struct hp_class *cls);

/* ---- ctl_release.c ---- */

void hp__release_init(struct hp_controller *c);
void hp__release_free(struct hp_controller *c);
void hp__reconcile_volume(struct hp_controller *c, const char *qkey, const char *key);
/* Runs the release of op's directory (op->pv_name, op->rel, op->on_delete). */
void hp__release_dir(struct op *op);
/* PV pv was deleted (by us, or the API server says it is gone): the cache's copy and its claim's
 * are stale until the watch shows it (expect.h). */
void hp__remember_gone(struct hp_controller *c, const char *pv);

/* ---- ctl_provision.c ---- */

void hp__reconcile_claim(struct hp_controller *c, const char *qkey, const char *key);
/* Undoes the half-made volume op->pv_name (the one compensation path: see ctl_provision.c):
 * the API server's word that its PV does not exist, then hp__cleanup_dir. Takes the op. */
void hp__compensate(struct op *op);
/* The CLEANUP of a half-made volume whose PV is known not to exist. Takes the op. */
void hp__cleanup_dir(struct op *op);

/* ---- ctl_sweep.c ---- */

void hp__sweep_init(struct hp_controller *c);
void hp__sweep_free(struct hp_controller *c);
void hp__reconcile_orphan(struct hp_controller *c, const char *qkey, const char *pv);
/* After a journal read of r: unrecorded directories logged, records without a volume queued
 * (when synced), the orphan metrics. */
void hp__sweep_after_scan(struct hp_controller *c, const struct root *r,
                          const struct hp_fsop *f, int first, int synced);

/* ---- ctl_capacity.c: capacity-aware scheduling (docs/design.md, "Capacity-aware scheduling") */

/* Part of hp_controller_new (after the roots) and of the final free. */
void hp__capacity_init(struct hp_controller *c);
void hp__capacity_free(struct hp_controller *c);
/* hp_controller_start: starts watching this node's CSIStorageCapacity objects. */
void hp__capacity_start(struct hp_controller *c);
/* hp_controller_close: cancels requests, closes its informer and handles (c->capacity_busy
 * counts them until they are closed; each close calls c->maybe_closed). */
void hp__capacity_stop(struct hp_controller *c);
/* Something placement reads changed (a root's numbers, a class, the caches' sync): publishing
 * looks again on the next loop turn. Cheap; any number of calls coalesce. */
void hp__capacity_changed(const struct hp_controller *c);
/* Leadership began (or the periodic resync): the leader keeps the CSIDriver object right and
 * removes the CSIStorageCapacity objects of nodes that no longer exist. */
void hp__capacity_leader_work(struct hp_controller *c);
/* Pure decisions, for tests: */
/* 0 when name may name a CSIDriver (a lower-case DNS subdomain of at most 63 characters), else
 * -EINVAL with the reason in why. */
int hp__capacity_driver_name_ok(const char *name, char *why, size_t len);
/* The CSIStorageCapacity object name of (node, class): readable and unique (a hash of both). */
void hp__capacity_object_name(const char *node, const char *class_name, char *out, size_t len);
/* The csi.storage.k8s.io/managed-by label value of node's instance (a label value: at most 63
 * characters, a hash of the node when it would be longer). */
void hp__capacity_managed_by(const char *node, char *out, size_t len);
/* Whether a published value should be replaced by want: any difference when exact (the
 * accounting behind it changed), else a drift of at least 1 % or 1 GiB. */
int hp__capacity_differs(uint64_t have, uint64_t want, int exact);

#endif

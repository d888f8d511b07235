/* controller room: hard limits (project quotas, README "Hard limits") -- which roots enforce
 * each volume's size and can do so now, what a filesystem request needs of them, and the lowest
 * project ID a new volume may take.
 *
 * The filesystem work (IDs, tags, limits) is fsops'; this room only carries, between the loop
 * and the requests, what a probe found and which IDs the journals name: a new ID is handed out
 * above every ID a record names, so that an ID recorded before a crash cut its tagging short is
 * never given to a second volume (docs/design.md "Project IDs").
 *
 * Loop thread only; see controller_internal.h for the rooms and their order.
 */
#include <stdlib.h>
#include <string.h>

#include <linux/dqblk_xfs.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/log.h"

/* A probe result that can enforce: a copy worth keeping. */
static int enforcing(const struct hp_quota_fs *fs)
{
    unsigned both = FS_QUOTA_PDQ_ACCT | FS_QUOTA_PDQ_ENFD;
    return fs && (fs->kind == HP_QUOTA_XFS || fs->kind == HP_QUOTA_EXT4) &&
           (fs->flags & both) == both;
}

void hp__quota_request(const struct hp_controller *c, const struct root *r, struct hp_fsop *f,
                       const char *pv)
{
    const struct hp_record *rec = pv ? hp_volindex_record(c->index, pv) : NULL;
    int makes = f->kind == HP_FSOP_PROVISION || f->kind == HP_FSOP_SCAN;

    if (makes)
        f->hard_limits = r->hard_limits;
    if (f->kind == HP_FSOP_PROVISION)
        f->quota_hint = c->quota_id_max < HP_QUOTA_ID_MAX ? c->quota_id_max + 1 : 0;
    /* A copy costs 12 KiB: only for a request that may touch a project. */
    if (r->quota_fs && !f->quota_fs &&
        ((makes && r->hard_limits) || (rec && rec->project_id) || f->adopt)) {
        f->quota_fs = hp_xmalloc(sizeof(*f->quota_fs));
        *f->quota_fs = *r->quota_fs;
    }
}

static void note_id(struct hp_controller *c, uint32_t id)
{
    if (id > c->quota_id_max)
        c->quota_id_max = id;
}

void hp__quota_seen(struct hp_controller *c, struct root *r, const struct hp_fsop *f)
{
    if (f->have_out)
        note_id(c, f->out.project_id);
    for (size_t i = 0; i < f->nrecords; i++)
        note_id(c, f->records[i].project_id);
    if (enforcing(f->quota_fs)) {
        if (!r->quota_fs)
            r->quota_fs = hp_xmalloc(sizeof(*r->quota_fs));
        *r->quota_fs = *f->quota_fs;
    }
    if (f->kind != HP_FSOP_SCAN || !f->hard_limits)
        return;
    if (f->quota_status < 0) {
        const char *msg = f->quota_msg ? f->quota_msg : "the probe failed";
        char *why = hp_xasprintf("cannot enforce its hard limits now: %s", msg);
        if (!r->quota_err || strcmp(r->quota_err, why) != 0)
            hp_log_error("controller: volume path %s has hard limits in --config but cannot "
                         "enforce them now, so no new volume is made there: %s",
                         r->path, msg);
        free(r->quota_err);
        r->quota_err = why;
    } else if (r->quota_err) {
        hp_log_info("controller: volume path %s can enforce hard limits again", r->path);
        free(r->quota_err);
        r->quota_err = NULL;
    }
}

const char *hp__quota_excluded(const struct root *r, const struct hp_class_params *params)
{
    if (!r->hard_limits && params->hard_limits == HP_HARD_LIMITS_REQUIRED)
        return "has no hard limits (\"hardLimits\" in --config), which the StorageClass requires "
               "(parameter hardLimits: required)";
    if (r->hard_limits && r->quota_err)
        return r->quota_err;
    return NULL;
}

void hp__quota_root_free(struct root *r)
{
    free(r->quota_fs);
    free(r->quota_err);
    r->quota_fs = NULL;
    r->quota_err = NULL;
}

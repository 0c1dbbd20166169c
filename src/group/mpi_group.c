/* mpi_group.c — groups over MPI (spmd/mpi.h; compiled only with
 * SPMD_WITH_MPI): MPI's initialization (spmd's only when the application
 * did not initialize MPI itself), a group over a communicator, and
 * subgroups through MPI_Comm_create_group.  The transport side is
 * transport/mpi_*.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "envinfo.h"
#include "group_internal.h"
#include "spmd/mpi.h"
#include "transport/mpi_internal.h"

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

/* Only registered when spmd called MPI_Init_thread: the application's MPI
 * is the application's to finalize.  Not after a rank died: Open MPI's
 * MPI_Finalize waits for every process of the job, the dead one too, so the
 * process would never exit (mpirun --enable-recovery lets it end without). */
static void finalize_at_exit(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (spmd__mpi_rank_lost()) {
        SPMD_LOGW("MPI_Finalize skipped: a rank of the job died, and MPI would wait for it forever");
        return;
    }
    MPI_Finalize();
}

int spmd__mpi_app_initialized(void) {
    int ini = 0, fin = 0;
    MPI_Initialized(&ini);
    MPI_Finalized(&fin);
    return ini && !fin;
}

/* MPI is initialized afterwards (by us when may_init and nobody did), and
 * its thread level recorded. */
static spmd_status ensure_mpi(int may_init, char *err, size_t errlen) {
    pthread_mutex_lock(&init_mu);
    int ini = 0, fin = 0, provided = MPI_THREAD_SINGLE;
    spmd_status st = SPMD_OK;
    MPI_Finalized(&fin);
    MPI_Initialized(&ini);
    if (fin) {
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "MPI has been finalized: no group over MPI can be formed");
    } else if (!ini && !may_init) {
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "MPI is not initialized (call MPI_Init first)");
    } else if (!ini) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            char e[256];
            spmd__mpi_errstr(rc, e, sizeof e);
            st = spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "MPI_Init_thread failed: %s", e);
        } else {
            atexit(finalize_at_exit);
        }
    } else {
        MPI_Query_thread(&provided);
    }
    if (!st) {
        int before = spmd__mpi_level();
        spmd__mpi_set_level(provided);
        if (provided != MPI_THREAD_MULTIPLE && before != provided)
            SPMD_LOGW("MPI provides %s, not MPI_THREAD_MULTIPLE: spmd runs no thread of its own, so async "
                      "collectives (and DDP's buckets) run when they are waited for, without overlap",
                      spmd__mpi_level_name(provided));
    }
    pthread_mutex_unlock(&init_mu);
    return st;
}

/* A group over comm (collective over comm). */
static spmd_status make_group(MPI_Comm comm, const spmd_group_opts *opts, spmd_group **out, char *err,
                              size_t errlen) {
    int rank = 0, world = 0;
    spmd__mpi_lock();
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    spmd__mpi_unlock();
    if (opts->rank >= 0 && opts->rank != rank)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "rank %d was asked for, but this process is rank %d of the MPI communicator", opts->rank,
                          rank);
    if (opts->world_size > 0 && opts->world_size != world)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "world size %d was asked for, but the MPI communicator has %d ranks", opts->world_size,
                          world);
    spmd_group *g = spmd__group_alloc_sub(rank, world);
    if (!g) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    snprintf(g->name, sizeof g->name, "%s", opts->name ? opts->name : "default");
    snprintf(g->t.name, sizeof g->t.name, "%s", g->name);
    spmd_group_set_timeout(g, opts->timeout_ms);
    spmd_status st = spmd__mpi_attach(&g->t, comm, spmd__group_deadline(g), err, errlen);
    if (st) {
        spmd__group_free_sub(g);
        return st;
    }
    g->local_rank = spmd__mpi_of(&g->t)->local_rank;
    g->local_world = g->t.local_world;
    if ((st = spmd__exec_start(g, err, errlen))) {
        spmd__p2p_stop(&g->t);
        spmd__group_free_sub(g);
        return st;
    }
    *out = g;
    return SPMD_OK;
}

static const char *env_family_vars(const char *source) {
    if (!strcmp(source, "torchrun")) return "RANK/WORLD_SIZE, set by spmdrun or torchrun";
    if (!strcmp(source, "slurm")) return "SLURM_PROCID/SLURM_NTASKS, set by srun";
    if (!strcmp(source, "pmi")) return "PMI_RANK/PMI_SIZE";
    if (!strcmp(source, "openmpi")) return "OMPI_COMM_WORLD_RANK/SIZE";
    return source;
}

/* A process started without an MPI launcher is an MPI world of its own.  If
 * its environment names a larger world (spmdrun's or torchrun's RANK and
 * WORLD_SIZE, Slurm's, PMI's), each such process would train alone while the
 * user believes they form one job: an error naming both worlds instead. */
static spmd_status check_world_of_one(char *err, size_t errlen) {
    int world = 0;
    spmd__mpi_lock();
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    spmd__mpi_unlock();
    spmd__envinfo env;
    char e2[SPMD__ERRLEN];
    if (world != 1 || spmd__env_read(&env, e2, sizeof e2) != SPMD_OK || env.world <= 1) return SPMD_OK;
    return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                      "the MPI backend: MPI_COMM_WORLD has 1 rank (this process was not started by an MPI "
                      "launcher), but the environment names a world of %d (%s, rank %d); start the program "
                      "with mpirun -np %d or srun --mpi=pmix, or use SPMD_BACKEND=spmd to form the group "
                      "from that environment",
                      env.world, env_family_vars(env.source), env.rank, env.world);
}

spmd_status spmd__group_init_mpi(const spmd_group_opts *opts, spmd_group **out, char *err, size_t errlen) {
    if (opts->init_method || opts->store)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "the MPI backend forms the group from MPI_COMM_WORLD: init_method and store must be unset");
    spmd_status st = ensure_mpi(1, err, errlen);
    if (st) return st;
    if ((st = check_world_of_one(err, errlen))) return st;
    return make_group(MPI_COMM_WORLD, opts, out, err, errlen);
}

spmd_status spmd_group_from_mpi_comm(MPI_Comm comm, const spmd_group_opts *opts, spmd_group **out, char *err,
                                     size_t errlen) {
    static const spmd_group_opts dflt = SPMD_GROUP_OPTS_DEFAULT;
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_from_mpi_comm: out is NULL");
    if (!opts) opts = &dflt;
    if (opts->init_method || opts->store || (opts->backend && strcmp(opts->backend, "mpi") && strcmp(opts->backend, "auto")))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "spmd_group_from_mpi_comm: init_method, store and a backend other than mpi do not apply");
    spmd_status st = ensure_mpi(0, err, errlen);
    if (st) return st;
    if (comm == MPI_COMM_NULL) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_from_mpi_comm: MPI_COMM_NULL");
    int inter = 0;
    spmd__mpi_lock();
    MPI_Comm_test_inter(comm, &inter);
    spmd__mpi_unlock();
    if (inter)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_from_mpi_comm: an inter-communicator has no ranks "
                          "of its own to form a group of");
    return make_group(comm, opts, out, err, errlen);
}

int spmd_mpi_rank_lost(void) { return spmd__mpi_rank_lost(); }

int spmd_group_mpi_thread_level(const spmd_group *g) {
    return g && g->t.ext == &spmd__mpi_ext ? spmd__mpi_level() : -1;
}

static uint64_t list_hash(const int *ranks, int n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ranks[i]) * 1099511628211ull;
    return h >> 1; /* non-negative as an int64, so it can be negated */
}

spmd_status spmd__group_mpi_subgroup(spmd_group *g, int *sorted, int nranks, int me, int id, spmd_group **out) {
    /* Every rank of g must list the same ranks: agree through g (within its
     * deadline) before MPI_Comm_create_group, which waits for every member. */
    const int64_t h = (int64_t)list_hash(sorted, nranks);
    int64_t v[2] = {h, -h};
    spmd_status st = spmd_all_reduce(g, v, v, 2, SPMD_I64, SPMD_MAX);
    if (st) {
        free(sorted);
        return st; /* the message is g's already */
    }
    if (v[0] != h || v[1] != -h) {
        free(sorted);
        return spmd__group_error(g, SPMD_ERR_MISMATCH,
                                 "new_subgroup: the ranks of the group passed different rank lists");
    }
    if (me < 0) {
        free(sorted);
        *out = NULL;
        return SPMD_OK;
    }
    spmd__mpi_link *l = spmd__mpi_of(&g->t);
    MPI_Group pg = MPI_GROUP_NULL, sg = MPI_GROUP_NULL;
    MPI_Comm nc = MPI_COMM_NULL;
    spmd__mpi_lock();
    int rc = MPI_Comm_group(l->ctrl, &pg);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(pg, nranks, sorted, &sg);
    /* the tag keeps concurrent creations apart; 1 is the notices' */
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(l->ctrl, sg, 2 + id % (l->tag_ub - 2), &nc);
    if (sg != MPI_GROUP_NULL) MPI_Group_free(&sg);
    if (pg != MPI_GROUP_NULL) MPI_Group_free(&pg);
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        char e[256];
        spmd__mpi_errstr(rc, e, sizeof e);
        free(sorted);
        return spmd__group_error(g, SPMD_ERR_SYSTEM, "new_subgroup: MPI_Comm_create_group: %s", e);
    }
    char name[64], err[SPMD__ERRLEN];
    snprintf(name, sizeof name, "%.40s.sub%d", g->name, id);
    spmd_group_opts o = SPMD_GROUP_OPTS_DEFAULT;
    o.name = name;
    o.timeout_ms = g->timeout_ms;
    spmd_group *s = NULL;
    st = make_group(nc, &o, &s, err, sizeof err);
    spmd__mpi_lock();
    MPI_Comm_free(&nc);
    spmd__mpi_unlock();
    if (st) {
        free(sorted);
        return spmd__group_error(g, st, "new_subgroup: %s", err);
    }
    s->parent = g;
    s->parent_ranks = sorted;
    *out = s;
    return SPMD_OK;
}

/* test_die.h — fault injection at an exact point of a recovery protocol, for
 * the tests (docs/RELIABILITY.md, "Failures during the recovery").
 *
 * SPMD_TEST_DIE_AT=POINT:RANK[@EPOCH][,...] makes the process that reaches
 * the named POINT as RANK (its rank in the group the point belongs to) of
 * the group of that epoch (spmd_group_epoch; for a shrink the epoch it
 * attempts; without @EPOCH any) SIGKILL itself there, so a test can kill a rank inside an agreement or a
 * state transfer without racing it.  Unset (always, outside the tests), a
 * point costs one getenv.  The points: shrink-registered, shrink-agreed,
 * shrink-form (src/group/shrink.c), elastic-agree and elastic-transfer
 * (src/ddp/elastic.c). */
#ifndef SPMD_COMMON_TEST_DIE_H
#define SPMD_COMMON_TEST_DIE_H

void spmd__test_die_at(const char *point, int rank, int epoch);

#endif

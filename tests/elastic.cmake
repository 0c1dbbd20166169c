# Recovery in place (issue 25, docs/RELIABILITY.md "Recovery in place"): a
# killed rank revokes the group on every path; the survivors shrink and go on.
spmd_test(test_elastic_revoke SOURCES mp/test_elastic_revoke.c LABELS mp fault elastic TIMEOUT 240)
spmd_test(test_elastic_shrink SOURCES mp/test_elastic_shrink.c LABELS mp fault elastic TIMEOUT 400)
spmd_test(test_elastic_grow SOURCES mp/test_elastic_grow.c LABELS mp fault elastic TIMEOUT 300)

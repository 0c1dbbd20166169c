# Which transport a group uses (SPMD_BACKEND, spmd_group_opts.backend): in
# every build, with or without the MPI backend.
spmd_test(test_backend SOURCES unit/test_backend.c LABELS unit TIMEOUT 30)

# spmd-train's model-parallel path (--pp/--tp/--zero/--dataset cifar10):
# its own source, compiled into the spmd-train executable.
target_sources(spmd-train PRIVATE ${CMAKE_CURRENT_LIST_DIR}/spmd-train-parallel.c)

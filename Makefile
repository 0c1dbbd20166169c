# Thin wrapper around CMake.  `make check` is what CI runs: the normal build
# (warnings are errors) plus ASan+UBSan and TSan builds, each running ctest.
JOBS ?= $(shell nproc)
CMAKE ?= cmake
BUILD ?= build
# The torch backend (bindings/torch): required in the normal build (CI), so a
# missing dependency fails loudly; `make SPMD_WITH_TORCH=AUTO` builds without.
SPMD_WITH_TORCH ?= ON
# The MPI backend (SPMD_WITH_MPI): on in the normal and sanitizer builds so
# its tests (label mpi) run; the clang build leaves it off, so the core is
# built and tested without MPI too.
SPMD_WITH_MPI ?= ON
# ccache, when installed (scripts/install-deps.sh installs it): every compiler
# found on PATH goes through it — CMake's C and C++ compilers in every build
# dir, and the pip test's setup.py builds run by ctest — with the cache in
# $(SPMD_CACHE)/ccache when that can be written (CI keeps /var/cache/spmd
# between runs; the torch 2.x root and its own cache live there too).
SPMD_CACHE ?= /var/cache/spmd
ifneq ($(wildcard /usr/lib/ccache/cc),)
export PATH := /usr/lib/ccache:$(PATH)
ifeq ($(CCACHE_DIR),)
ifeq ($(shell mkdir -p $(SPMD_CACHE)/ccache 2>/dev/null && test -w $(SPMD_CACHE)/ccache && echo y),y)
export CCACHE_DIR := $(SPMD_CACHE)/ccache
endif
endif
endif

.PHONY: all build demo check test test-asan test-tsan test-clang check-torch2 torch-suite torch-suite2 install clean

all: build

build:
	$(CMAKE) -S . -B $(BUILD) -DSPMD_WERROR=ON -DSPMD_WITH_TORCH=$(SPMD_WITH_TORCH) -DSPMD_WITH_MPI=$(SPMD_WITH_MPI) >/dev/null
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# The main job: the seed CNN on Fashion-MNIST, 2 processes under spmdrun
# (the learning rate scaled by the world size, as docs/TRAINING.md's runs).
demo: build
	$(BUILD)/tools/spmdrun --standalone --nproc-per-node 2 $(BUILD)/tools/spmd-train --model cnn --epochs 1 --lr-scaling linear

# The suite once per transport: the default (shared memory on one host), TCP
# only, and shared memory required (the netns test mixes both: rings within a
# namespace, TCP across).  TRANSPORT_LABELS: every test whose ranks talk
# over spmd's own transport — whole labels (anchored: 'mp' alone would match
# 'mpi', whose tests run over MPI whatever SPMD_TRANSPORT says).
TRANSPORT_LABELS = '^(mp|launcher|netns|example|ddp|parallel|rpc|fault|bench-tool|train)$$'
# The transport-labelled tests run under tcp and shm only: shm is auto with
# the quiet fall-back to TCP made an error (src/transport/shm_link.c is the
# only place the two differ), so on a host where shared memory works an auto
# pass of them runs the same code as the shm pass and can only pass when that
# one does.  auto itself runs in every other test here and in every test of
# the sanitizer and clang stages.
test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure -LE $(TRANSPORT_LABELS)
	cd $(BUILD) && SPMD_TRANSPORT=tcp ctest -j $(JOBS) --output-on-failure -L $(TRANSPORT_LABELS)
	cd $(BUILD) && SPMD_TRANSPORT=shm ctest -j $(JOBS) --output-on-failure -L $(TRANSPORT_LABELS)

# The sanitizer builds are optimised a little (-O1, as the sanitizers'
# documentation advises): every access is still instrumented, and the
# compute-bound tests that fill most of the sanitizer stages (training) take
# 1.5-1.75x less CPU than unoptimised (-O0; TSan: test_nn_conv 8.1 -> 5.3 s,
# test_nn_layers 13.0 -> 7.4 s).
SANITIZE_FLAGS = -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG='-g -O1'
test-asan:
	$(CMAKE) -S . -B build-asan -DSPMD_WERROR=ON -DSPMD_SANITIZE=address $(SANITIZE_FLAGS) -DSPMD_WITH_MPI=$(SPMD_WITH_MPI) >/dev/null
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest -j $(JOBS) --output-on-failure -LE no-asan

test-tsan:
	$(CMAKE) -S . -B build-tsan -DSPMD_WERROR=ON -DSPMD_SANITIZE=thread $(SANITIZE_FLAGS) -DSPMD_WITH_MPI=$(SPMD_WITH_MPI) >/dev/null
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		ctest -j $(JOBS) --output-on-failure -LE no-tsan

# clang builds the library and runs the suite too (warnings are errors there
# as well), without the MPI backend and without the torch backend: spmd_torch
# is C++ built by g++ whatever CC says, and its tests (label torch) exercise
# the binding, which `test` and check-torch2 already run on both torches;
# libspmd's C under clang is what this stage is for.  DWARF 4: Debian 12's
# valgrind cannot read clang 14's DWARF 5.
test-clang:
	CC=clang $(CMAKE) -S . -B build-clang -DSPMD_WERROR=ON -DSPMD_WITH_MPI=OFF -DSPMD_WITH_TORCH=OFF \
		-DCMAKE_C_FLAGS=-gdwarf-4 >/dev/null
	$(CMAKE) --build build-clang -j $(JOBS)
	cd build-clang && ctest -j $(JOBS) --output-on-failure

# torch 2.x: spmd_torch built against Debian 13's torch 2.6 and its tests
# (label torch) run, inside a Debian 13 root that scripts/torch2-root.sh makes
# with debootstrap the first time and reuses after (the source tree is bound
# into it; the build dir is $(TORCH2_BUILD)).  Part of `make check` wherever
# debootstrap is installed.
TORCH2_BUILD ?= build-torch2
check-torch2:
	./scripts/torch2-root.sh run -- sh -c 'cmake -S . -B $(TORCH2_BUILD) -DSPMD_WERROR=ON \
		-DSPMD_WITH_TORCH=ON -DSPMD_WITH_MPI=ON >/dev/null && \
		cmake --build $(TORCH2_BUILD) -j $(JOBS) --target spmd_torch spmdrun spmd-train test_ckpt_fixture test_ckpt_dist test_ckpt_value && \
		cd $(TORCH2_BUILD) && ctest -j $(JOBS) --output-on-failure -L torch'
# torch's own distributed suite (tests/torch/suite), gloo against spmd at
# world 2 and 3: on this machine's torch, and on torch 2.6 in the root.
# Results in out/torch-suite*/ (JSON per run; compare.py's report).
torch-suite: build
	tests/torch/suite/run_all.sh $(BUILD) out/torch-suite --start fork
torch-suite2:
	./scripts/torch2-root.sh run -- sh -c 'cmake -S . -B $(TORCH2_BUILD) -DSPMD_WITH_TORCH=ON >/dev/null && \
		cmake --build $(TORCH2_BUILD) -j $(JOBS) --target spmd_torch && \
		tests/torch/suite/run_all.sh $(TORCH2_BUILD) out/torch-suite2 --start fork'
TORCH2_CHECK := $(if $(shell command -v debootstrap || command -v /usr/sbin/debootstrap),check-torch2)

# Making the torch 2.x root on a fresh machine is mostly download and unpack
# (debootstrap, apt: minutes of wall time, little CPU), so `check` starts it
# in the background beside the CPU-bound stages (its output in
# $(BUILD)/torch2-root.log) and waits for it before check-torch2, which
# would report a failure itself (it makes the root when missing).
ifeq ($(TORCH2_CHECK),)
check: test test-asan test-tsan test-clang
	@echo "check: normal, ASan+UBSan, TSan and clang suites passed"
else
check:
	@mkdir -p $(BUILD)
	nice ./scripts/torch2-root.sh ensure >$(BUILD)/torch2-root.log 2>&1 & root=$$!; \
	$(MAKE) test test-asan test-tsan test-clang; rc=$$?; \
	wait $$root || echo "check: making the torch 2.x root failed (retried by check-torch2):" \
		"see $(BUILD)/torch2-root.log" >&2; \
	[ $$rc = 0 ] && $(MAKE) check-torch2
	@echo "check: normal, ASan+UBSan, TSan, clang and torch 2.x suites passed"
endif

install: build
	$(CMAKE) --install $(BUILD)

clean:
	rm -rf build build-asan build-tsan build-clang $(TORCH2_BUILD)

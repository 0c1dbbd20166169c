# Thin wrapper around CMake.  `make check` is what CI runs: the normal build
# (warnings are errors) plus ASan+UBSan and TSan builds, each running ctest.
JOBS ?= $(shell nproc)
CMAKE ?= cmake
BUILD ?= build
# The torch backend (bindings/torch): required in the normal build (CI), so a
# missing dependency fails loudly; `make SPMD_WITH_TORCH=AUTO` builds without.
SPMD_WITH_TORCH ?= ON

.PHONY: all build demo check test test-asan test-tsan install clean

all: build

build:
	$(CMAKE) -S . -B $(BUILD) -DSPMD_WERROR=ON -DSPMD_WITH_TORCH=$(SPMD_WITH_TORCH) >/dev/null
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# The main job: the seed CNN on Fashion-MNIST, 2 processes under spmdrun.
demo: build
	$(BUILD)/tools/spmdrun --standalone --nproc-per-node 2 $(BUILD)/tools/spmd-train --model cnn --epochs 1

test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure

test-asan:
	$(CMAKE) -S . -B build-asan -DSPMD_WERROR=ON -DSPMD_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug >/dev/null
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest -j $(JOBS) --output-on-failure -LE no-asan

test-tsan:
	$(CMAKE) -S . -B build-tsan -DSPMD_WERROR=ON -DSPMD_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug >/dev/null
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		ctest -j $(JOBS) --output-on-failure -LE no-tsan

check: test test-asan test-tsan
	@echo "check: normal, ASan+UBSan and TSan suites passed"

install: build
	$(CMAKE) --install $(BUILD)

clean:
	rm -rf build build-asan build-tsan

# Thin wrapper over CMake for the README's two commands:
#   make demo   build the CLI, then run `stridepack demo` (GPU when usable, else CPU)
#   make test   build everything, then run every test with ctest
#
# What the CUDA backend is built for: CUDA_ARCHS, passed to CMake as
# SP_CUDA_ARCHS (cmake/cuda_arch.cmake; README, "Choosing what to build"):
#   all     every architecture from sm_80 on: the default of `make test` and `make build`
#   auto    this machine's GPUs only, no CUDA at all when none is visible: the
#           default of `make demo` when $(BUILD) is not configured yet (a
#           configured one is used as it is, so the demo after `make test`
#           builds nothing)
#   none    no CUDA backend
#   90, "90;100", native   those architectures
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CUDA_ARCHS ?=
# nvcc may live outside PATH in the usual CUDA prefix.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
override CMAKE_FLAGS += $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC))
CMAKE_CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

# The demo's choice: the one asked for, else the configured build's, else auto.
DEMO_ARCHS = $(or $(CUDA_ARCHS),$(if $(wildcard $(BUILD)/CMakeCache.txt),,auto))

.PHONY: all deps configure build demo test clean

all: build

deps:
	@sh tools/deps.sh

configure: deps
	$(CMAKE_CONFIGURE) -DSP_CUDA_ARCHS="$(or $(CUDA_ARCHS),all)"

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The demo needs the CLI and the library only: no tests, benchmarks or fuzzer.
demo: deps
	$(CMAKE_CONFIGURE) $(if $(DEMO_ARCHS),-DSP_CUDA_ARCHS="$(DEMO_ARCHS)")
	cmake --build $(BUILD) -j $(JOBS) --target stridepack_cli
	$(BUILD)/tools/stridepack demo

# ctest, then the reason of every skipped test and test case (ctest shows none).
test: build
	bash tools/run_tests.sh $(BUILD) $(JOBS)

clean:
	rm -rf $(BUILD)

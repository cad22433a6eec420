# Thin wrapper over CMake for the README's two commands:
#   make demo   build the CLI, then run `stridepack demo` (GPU when usable, else CPU)
#   make test   build everything, then run every test with ctest
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# nvcc may live outside PATH in the usual CUDA prefix.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
override CMAKE_FLAGS += $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC))

.PHONY: all deps configure build demo test clean

all: build

deps:
	@sh tools/deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The demo needs the CLI and the library only: no tests, benchmarks or fuzzer.
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target stridepack_cli
	$(BUILD)/tools/stridepack demo

# ctest, then the reason of every skipped test (ctest shows none).
test: build
	bash tools/run_tests.sh $(BUILD) $(JOBS)

clean:
	rm -rf $(BUILD)
